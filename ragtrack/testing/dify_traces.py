"""Traces in the shape Dify's built-in MLflow tracing provider writes them, for the tests and the docs.

Dify (``api/core/ops/mlflow_trace``) traces every run of an app into an MLflow experiment:

* a **chatbot** (chat, agent-chat, completion) app writes each message as two traces: a
  ``dataset_retrieval`` trace (one RETRIEVER span: inputs the query, outputs ``{"documents": [...]}``,
  Dify's own documents — ``page_content`` and ``metadata`` with ``doc_id``, ``document_id``,
  ``dataset_id``, ``score``) and a ``message`` trace (one LLM span: inputs the prompt messages,
  outputs the answer, attributes ``message_id`` and the message's metadata —
  ``conversation_id``, ``from_end_user_id``, ``from_source``…). They share the ``message_id``
  attribute and nothing else;
* a **workflow** or **chatflow** (advanced-chat) app writes each run as one ``workflow`` trace: a
  CHAIN root span (inputs the run's variables with ``query``, outputs the run's outputs,
  attributes ``workflow_run_id``, ``conversation_id``, ``user_id``…) with a span per node — the
  Knowledge Retrieval node a RETRIEVER span whose outputs are MLflow documents with the node's
  result metadata (``segment_id``, ``document_name``, ``score``, ``position``…).

Both set MLflow's ``mlflow.trace.user`` (the end user's ``session_id``: the ``user`` string the app
sent) and ``mlflow.trace.session`` (the conversation). :func:`write_dify_traces` writes a
:class:`~ragtrack.testing.conversations.ConversationLog` app's turns that way, with the IDs the Dify
stand-in serves, so ``logs pull --from mlflow`` can be tested against both at once.

:func:`write_workflow_runs` writes the runs the workflow stand-in performed
(:mod:`ragtrack.testing.dify_workflow`) node by node, each node span as the provider shapes it, so a
test can hold what ``logs pull`` and ``monitor`` find against the stand-in's own record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import AssessmentSource, AssessmentSourceType, Document, SpanEvent, SpanStatusCode, SpanType
from mlflow.tracing.constant import SpanAttributeKey, TokenUsageKey, TraceMetadataKey
from mlflow.tracing.provider import safe_set_span_in_context

from ragtrack.production.messages import epoch_ms
from ragtrack.testing.conversations import Conversation, ConversationLog, Turn
from ragtrack.testing.dify_workflow import NodeRun, Workflow, WorkflowRun
from ragtrack.testing.knowledge import stable_id
from ragtrack.tracking.trace_writer import TraceBatch

SHAPES = ("chat", "workflow", "advanced-chat")
TENANT = str(stable_id("tenant"))
DATASET = str(stable_id("dataset", "kb"))


def session_of(c: Conversation) -> str:
    """The end user's ``session_id`` as the Dify stand-in names it (a WebApp user has a browser session)."""
    return str(stable_id("webapp-session", c.user)) if c.channel == "webapp" else c.user


def end_user_of(app: str, c: Conversation) -> str:
    """The stand-in's end-user ID for a conversation (see ``dify_server.EndUser``)."""
    kind = "browser" if c.channel == "webapp" else "service_api"
    return str(stable_id("end-user", str(stable_id("app", app)), kind, session_of(c)))


def write_dify_traces(log: ConversationLog, app: str, experiment_id: str, shape: str = "chat") -> int:
    """Every turn of ``app``'s conversations as Dify's provider traces it (``shape``: a chatbot app,
    a workflow app, or a chatflow); how many turns were written."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}")
    turns = 0
    with TraceBatch(MlflowClient()) as batch:  # stored as MLflow's exporter stores them, in fewer store calls
        for c in log.of_app(app, deleted=True):
            for t in log.visible(c):
                if shape == "chat":
                    _chatbot(app, c, t, experiment_id, batch)
                else:
                    _workflow(app, c, t, experiment_id, shape, batch)
                turns += 1
    batch.write(experiment_id)
    return turns


def _ns(iso: str, seconds: float = 0.0) -> int:
    return (epoch_ms(iso) + int(seconds * 1000)) * 1_000_000


def _set_user(span, user: str, conversation: str | None) -> None:
    metadata = {TraceMetadataKey.TRACE_USER: user}
    if conversation:
        metadata[TraceMetadataKey.TRACE_SESSION] = conversation
    with safe_set_span_in_context(span):
        mlflow.update_current_trace(metadata=metadata)


def _chatbot(app: str, c: Conversation, t: Turn, experiment_id: str, batch: TraceBatch) -> None:
    metadata = {
        "conversation_id": c.id,
        "ls_provider": "openai",
        "ls_model_name": "gpt-4o-mini",
        "status": "normal",
        "from_end_user_id": end_user_of(app, c),
        "from_account_id": None,
        "agent_based": False,
        "workflow_run_id": None,
        "from_source": "api",
        "message_id": t.id,
        "tenant_id": TENANT,
        "app_id": str(stable_id("app", app)),
        "user_id": end_user_of(app, c),
        "app_name": app,
        "workspace_name": "loopback",
    }
    if t.retrieved:  # Dify traces the retrieval only when the app retrieved
        span = mlflow.start_span_no_context(
            "dataset_retrieval",
            span_type=SpanType.RETRIEVER,
            inputs=t.question,
            attributes={"message_id": t.id, "metadata": metadata},
            experiment_id=experiment_id,
            start_time_ns=_ns(t.created_at),
        )
        batch.own(span)
        documents = [
            {
                "page_content": r.text,
                "vector": None,
                "metadata": {
                    "doc_id": str(stable_id("node", r.id)),
                    "doc_hash": str(stable_id("hash", r.text)).replace("-", ""),
                    "document_id": r.document_id,
                    "dataset_id": DATASET,
                    "score": r.score,
                },
                "provider": "dify",
                "children": None,
            }
            for r in t.retrieved
        ]
        span.end(outputs={"documents": documents}, end_time_ns=_ns(t.created_at, 0.3))
    prompt = [
        {"role": "system", "content": "Use the following context as your learned knowledge: …"},
        {"role": "user", "content": t.question},
    ]
    span = mlflow.start_span_no_context(
        "message",
        span_type=SpanType.LLM,
        inputs=prompt,
        attributes={
            "message_id": t.id,
            "model_provider": "openai",
            "model_id": "gpt-4o-mini",
            "conversation_mode": "chat",
            "file_list": [],
            "total_price": 0.000042,
            **metadata,
            SpanAttributeKey.CHAT_USAGE: {
                TokenUsageKey.INPUT_TOKENS: 120,
                TokenUsageKey.OUTPUT_TOKENS: 40,
                TokenUsageKey.TOTAL_TOKENS: 160,
            },
        },
        experiment_id=experiment_id,
        start_time_ns=_ns(t.created_at),
    )
    batch.own(span)
    _set_user(span, session_of(c), c.id)
    span.end(outputs=t.answer, end_time_ns=_ns(t.created_at, 1.2))


def _workflow_root(
    app: str,
    run: str,
    question: str,
    at: tuple[str, int],
    user: str,
    conversation: str | None,
    status: str,
    tokens: int,
    batch: TraceBatch,
):
    """A workflow run's root span: inputs the query, attributes the run's metadata (Dify's
    ``WorkflowTraceInfo.metadata``), MLflow's user and session metadata; ``at``: (experiment, start ns)."""
    root = mlflow.start_span_no_context(
        "workflow",
        span_type=SpanType.CHAIN,
        inputs={"query": question},
        attributes={
            "workflow_id": str(stable_id("workflow", app)),
            "conversation_id": conversation,
            "workflow_run_id": run,
            "tenant_id": TENANT,
            "elapsed_time": 1.5,
            "status": status,
            "version": "2025-06-01 10:00:00",
            "total_tokens": tokens,
            "file_list": [],
            "triggered_from": "app-run",
            "user_id": user,
            "app_id": str(stable_id("app", app)),
            "app_name": app,
            "workspace_name": "loopback",
        },
        experiment_id=at[0],
        start_time_ns=at[1],
    )
    batch.own(root)
    _set_user(root, user, conversation)
    return root


def _workflow(app: str, c: Conversation, t: Turn, experiment_id: str, shape: str, batch: TraceBatch) -> None:
    chatflow = shape == "advanced-chat"
    run = str(stable_id("workflow-run", t.id))
    conversation = c.id if chatflow else None
    at = (experiment_id, _ns(t.created_at))
    root = _workflow_root(app, run, t.question, at, session_of(c), conversation, "succeeded", 160, batch)
    nodes = [("Start", "start", SpanType.CHAIN, {"query": t.question}, {"query": t.question})]
    documents = [
        Document(
            page_content=r.text,
            metadata={
                "_source": "knowledge",
                "dataset_id": DATASET,
                "dataset_name": "kb",
                "document_id": r.document_id,
                "document_name": r.document_name,
                "document_data_source_type": "upload_file",
                "segment_id": r.id,
                "retriever_from": "workflow",
                "score": r.score,
                "segment_hit_count": 1,
                "segment_word_count": len(r.text),
                "segment_position": n,
                "segment_index_node_hash": str(stable_id("hash", r.text)).replace("-", ""),
                "doc_metadata": None,
                "position": n,
            },
        )
        for n, r in enumerate(t.retrieved, start=1)
    ]
    # An empty result stays the node's own outputs: Dify turns only a non-empty one into documents.
    outputs = documents or {"result": []}
    nodes.append(("Knowledge Retrieval", "knowledge-retrieval", SpanType.RETRIEVER, {"query": t.question}, outputs))
    nodes.append(("LLM", "llm", SpanType.LLM, [{"role": "user", "content": t.question}], t.answer))
    nodes.append(
        ("Answer" if chatflow else "End", "answer" if chatflow else "end", SpanType.CHAIN, {}, {"answer": t.answer})
    )
    for n, (title, kind, span_type, inputs, outputs) in enumerate(nodes):
        span = mlflow.start_span_no_context(
            title,
            span_type=span_type,
            parent_span=root,
            inputs=inputs,
            attributes={"node_id": str(stable_id("node", run, title)), "node_type": kind, "status": "succeeded"},
            start_time_ns=_ns(t.created_at, 0.1 * n),
        )
        span.end(outputs=outputs, end_time_ns=_ns(t.created_at, 0.1 * n + 0.1))
    root.end(outputs={"answer": t.answer} if chatflow else {"result": t.answer}, end_time_ns=_ns(t.created_at, 1.5))


@dataclass(frozen=True)
class TracedRun:
    """One run of the stand-in's workflow (:attr:`DifyServer.workflow_runs`), with when it ran, for
    whom, and a reviewer's thumbs on its trace (None: none)."""

    run: WorkflowRun
    created_at: str  # ISO 8601, UTC
    user: str  # the end user's session ID
    rating: str | None = None  # like | dislike


#: Dify node type → the span type its provider gives the node's span (``_get_node_span_type``).
NODE_SPAN_TYPES = {
    "llm": SpanType.LLM,
    "question-classifier": SpanType.LLM,
    "knowledge-retrieval": SpanType.RETRIEVER,
    "tool": SpanType.TOOL,
    "code": SpanType.TOOL,
    "http-request": SpanType.TOOL,
    "agent": SpanType.AGENT,
}


def run_id_of(traced: TracedRun) -> str:
    """The ``workflow_run_id`` a run is traced under: what ``logs pull`` stores it as."""
    return str(stable_id("workflow-run", traced.run.question, traced.created_at, traced.user))


def write_workflow_runs(runs: list[TracedRun], workflow: Workflow, app: str, experiment_id: str) -> list[str]:
    """Each run as Dify's provider traces a workflow (or, for a chat workflow, a chatflow) run: a
    ``workflow`` root span and one span per node as the stand-in ran it (:class:`NodeRun`), each span
    shaped as ``MLflowDataTrace.workflow_trace`` shapes it — title as name, ``node_id`` (the node's
    execution), ``node_type``, ``status``; an LLM or classifier node's prompt messages as inputs and its
    usage as attributes, an LLM node's text alone as outputs, a retrieval node's result as documents,
    a node that did not succeed an ERROR span with an ``exception`` event. Node times are the stream's:
    each node takes ``0.01 × its place`` seconds, one after the other. The run IDs, in order."""
    ids, rated = [], []
    with TraceBatch(MlflowClient()) as batch:
        for traced in runs:
            run, run_id = traced.run, run_id_of(traced)
            status = "failed" if run.failed else "succeeded"
            conversation = str(stable_id("conversation", run_id)) if workflow.chat else None
            start = _ns(traced.created_at)
            tokens = sum(n.tokens for n in run.nodes)
            at = (experiment_id, start)
            root = _workflow_root(app, run_id, run.question, at, traced.user, conversation, status, tokens, batch)
            for index, n in enumerate(run.nodes, start=1):
                end = start + int(0.01 * index * 1e9)
                _node_span(root, app, run_id, n, (start, end))
                start = end
            if run.failed:
                error = {"exception.message": next(n.error for n in run.nodes if n.error), "exception.type": "Error"}
                root.set_status(SpanStatusCode.ERROR)
                root.add_event(SpanEvent("exception", attributes=error))
            root.end(outputs=workflow.outputs(run, "answer") or {}, end_time_ns=start)
            ids.append(run_id)
            if traced.rating:
                rated.append((root.trace_id, traced))
    batch.write(experiment_id)
    for trace_id, traced in rated:  # a thumb comes later than its run, to a stored trace
        human = AssessmentSource(AssessmentSourceType.HUMAN, traced.user)
        mlflow.log_feedback(trace_id=trace_id, name="thumbs", value=traced.rating, source=human)
    return ids


def _node_span(root, app: str, run_id: str, n: NodeRun, times: tuple[int, int]) -> None:
    start, end = times
    attributes: dict = {
        "node_id": str(stable_id("node-execution", run_id, n.title)),
        "node_type": n.node_type,
        "status": n.status,
        "tenant_id": TENANT,
        "app_id": str(stable_id("app", app)),
        "app_name": n.title,  # sic: Dify's provider puts the node's title there
    }
    inputs: Any = n.inputs
    if n.node_type in ("llm", "question-classifier"):
        inputs = [{"role": "user", "content": "\n".join(str(v) for v in n.inputs.values())}]
        usage = n.outputs.get("usage") or {"total_tokens": n.tokens}
        priced = {**usage, "total_price": f"{n.tokens * 0.000002:.7f}", "currency": "USD"}
        attributes |= {
            "model_name": "gpt-4o-mini",
            "model_provider": "openai",
            "finish_reason": n.outputs.get("finish_reason"),
            SpanAttributeKey.CHAT_USAGE: {
                TokenUsageKey.INPUT_TOKENS: usage.get("prompt_tokens", 0),
                TokenUsageKey.OUTPUT_TOKENS: usage.get("completion_tokens", 0),
                TokenUsageKey.TOTAL_TOKENS: usage.get("total_tokens", 0),
            },
            "usage": priced,
        }
    span = mlflow.start_span_no_context(
        n.title,
        span_type=NODE_SPAN_TYPES.get(n.node_type, SpanType.CHAIN),
        parent_span=root,
        inputs=inputs,
        attributes=attributes,
        start_time_ns=start,
    )
    if n.status != "succeeded":
        span.set_status(SpanStatusCode.ERROR)
        message = f"Node failed with status: {n.status}"
        span.add_event(SpanEvent("exception", attributes={"exception.message": message, "exception.type": "Error"}))
    outputs: Any = n.outputs
    result = n.outputs.get("result")
    if n.node_type == "knowledge-retrieval" and result:  # an empty result stays the node's own outputs
        outputs = [Document(page_content=r.get("content", ""), metadata=r.get("metadata", {})) for r in result]
    elif n.node_type == "llm":
        outputs = n.outputs.get("text", n.outputs)
    span.end(outputs=outputs, end_time_ns=end)
