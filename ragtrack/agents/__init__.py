"""External agents behind the agent port: a Dify or RAGFlow app, a Coze bot, any JSON endpoint, a Python
callable.

One module per kind (:mod:`~ragtrack.agents.dify`, :mod:`~ragtrack.agents.ragflow`, :mod:`~ragtrack.agents.coze`,
:mod:`~ragtrack.agents.http`, :mod:`~ragtrack.agents.python`), each registered
by one line in :data:`ragtrack.agent.AGENT_KINDS`. What they share lives in
:mod:`~ragtrack.agents.base` (spec, response cache, accounting),
:mod:`~ragtrack.agents.endpoint` (HTTP with timeout, retries, adaptive
concurrency) and :mod:`~ragtrack.agents.mapping` (platform contexts →
canonical passage IDs). :mod:`~ragtrack.agents.importer` turns a platform's
knowledge base into a local corpus plus its ID table.
"""
