"""Loopback servers that speak the Dify, RAGFlow and Coze APIs over a folder of documents.

For the tests and for trying ragtrack's platform support without a platform:
``python -m ragtrack.testing.dify_server --kb golden/kb`` (or ``ragflow_server``,
``coze_server``).
They bind 127.0.0.1 only and are small and deterministic: lexical search,
extractive answers, no model.
"""
