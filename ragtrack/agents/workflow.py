"""A Dify workflow's run, node by node: what its ``node_finished`` events said, read into plain data.

Dify streams a workflow (``POST /workflows/run``) or a chatflow
(``/chat-messages`` of an ``advanced-chat`` app) as server-sent events:
``workflow_started``, a ``node_started`` and a ``node_finished`` per node
(``api/core/app/entities/task_entities.py``: ``node_id``, ``node_type``,
``title``, ``index``, ``predecessor_node_id``, ``inputs``, ``outputs``,
``status``, ``error``, ``elapsed_time``, ``execution_metadata``,
``created_at``), the answer (``text_chunk``; a chatflow's ``message`` chunks
and ``message_end``) and ``workflow_finished`` (status, outputs, error).
Blocking mode returns only the last of these: the nodes are lost, which is why
node-by-node evaluation streams.

Each node becomes a :class:`Node` (cached with the reply) and then a stage of
the item's trace. A knowledge-retrieval node's ``outputs.result[]`` are its
contexts (``metadata.segment_id``, ``document_id``, ``position``, ``score``),
mapped to canonical passages like any platform's segments; the item's contexts
are those of every retrieval node that ran, in flow order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ragtrack.agent import NODE_ROLES
from ragtrack.agents.base import AgentCallError, Reply, number
from ragtrack.agents.endpoint import EndpointError, error_message
from ragtrack.agents.mapping import PlatformContext

#: Dify node type → the stage kind its span gets (MLflow span types; Dify's MLflow provider uses the same).
NODE_KINDS = {
    "llm": "llm",
    "question-classifier": "llm",
    "parameter-extractor": "llm",
    "knowledge-retrieval": "retriever",
}
RETRIEVAL = "knowledge-retrieval"
FAILED = ("failed", "exception")  # node statuses of a node that did not do its work


@dataclass
class Node:
    """One node of one run, as its ``node_finished`` event said (plain data: cached with the reply)."""

    id: str  # the node's ID in the app's graph (the same on every run)
    type: str  # Dify's node type: llm, question-classifier, knowledge-retrieval, ...
    title: str  # the name the user gave it in the editor
    index: int  # its place in the run (1 = the first that ran)
    status: str  # succeeded, failed, exception, stopped
    error: str | None
    elapsed_s: float
    tokens: int
    cost_usd: float
    start_ns: int
    end_ns: int
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # a retrieval node's result is in ``contexts``
    contexts: list[PlatformContext] | None = None  # a knowledge-retrieval node's result, in position order
    predecessor: str | None = None

    @property
    def kind(self) -> str:
        return NODE_KINDS.get(self.type, "chain")

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def describe(self) -> dict[str, Any]:
        """What a span and a record say of the node beyond its inputs and outputs."""
        return {
            "id": self.id,
            "type": self.type,
            "title": self.title,
            "index": self.index,
            "status": self.status,
            "error": self.error,
            "elapsed_s": self.elapsed_s,
            "tokens": self.tokens,
        }

    def described(self, role: tuple[str, str] | None) -> dict[str, Any]:
        """What a stage says of its node: :meth:`describe` and the role it plays, with why."""
        return {**self.describe(), **({"role": role[0], "role_from": role[1]} if role else {})}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Node:
        contexts = data.get("contexts")
        return cls(**{**data, "contexts": None if contexts is None else [PlatformContext(**c) for c in contexts]})


def result_contexts(result: Any) -> list[PlatformContext]:
    """A knowledge-retrieval node's ``outputs.result`` as contexts, in ``metadata.position`` order.
    An external knowledge base's entry has no segment ID: it is named by document and rank."""
    entries = [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []

    def position(nr: tuple[int, dict]) -> tuple[float, int]:
        meta = nr[1].get("metadata") if isinstance(nr[1].get("metadata"), dict) else {}
        return (number(meta.get("position")) or nr[0] + 1, nr[0])

    out = []
    for rank, (_, r) in enumerate(sorted(enumerate(entries), key=position), start=1):
        meta = r.get("metadata") if isinstance(r.get("metadata"), dict) else {}
        doc = str(meta.get("document_id") or "")
        out.append(
            PlatformContext(
                id=str(meta.get("segment_id") or f"{doc or r.get('title') or 'result'}@{rank}"),
                text=str(r.get("content") or ""),
                doc_id=doc,
                doc_name=str(meta.get("document_name") or r.get("title") or ""),
                score=number(meta.get("score")),
            )
        )
    return out


def read_node(data: dict, ends: dict[str, int]) -> Node:
    """One ``node_finished`` event's data. Dify's times are whole seconds: a node is placed at the end
    of its predecessor when that is later (``ends``: node ID → end, of the nodes read so far)."""
    outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
    meta = data.get("execution_metadata") if isinstance(data.get("execution_metadata"), dict) else {}
    elapsed = number(data.get("elapsed_time")) or 0.0
    predecessor = data.get("predecessor_node_id")
    start = max(int((number(data.get("created_at")) or 0) * 1e9), ends.get(str(predecessor), 0))
    node_type = str(data.get("node_type") or "")
    node = Node(
        id=str(data.get("node_id") or ""),
        type=node_type,
        title=str(data.get("title") or data.get("node_id") or ""),
        index=int(number(data.get("index")) or 0),
        status=str(data.get("status") or ""),
        error=str(data["error"]) if data.get("error") else None,
        elapsed_s=round(elapsed, 6),
        tokens=int(number(meta.get("total_tokens")) or 0),
        cost_usd=(number(meta.get("total_price")) or 0.0) if meta.get("currency", "USD") == "USD" else 0.0,
        start_ns=start,
        end_ns=start + int(elapsed * 1e9),
        inputs=data.get("inputs") if isinstance(data.get("inputs"), dict) else {},
        outputs={k: v for k, v in outputs.items() if not (node_type == RETRIEVAL and k == "result")},
        contexts=result_contexts(outputs.get("result")) if node_type == RETRIEVAL and "result" in outputs else None,
        predecessor=str(predecessor) if predecessor else None,
    )
    ends[node.id] = node.end_ns
    return node


@dataclass
class WorkflowReply:
    """A streamed run, read: its nodes, how it finished, the answer of a chatflow."""

    nodes: list[Node] = field(default_factory=list)
    status: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    answer: str | None = None  # a chatflow's message chunks, joined
    metadata: dict[str, Any] | None = None  # a chatflow's message_end metadata


def read_events(events: list[Any]) -> WorkflowReply:
    """The events of a workflow or chatflow stream, in order. An ``error`` event is the run's failure
    outside any node (Dify's task pipeline): raised as the endpoint error it is."""
    out, ends = WorkflowReply(), {}
    for e in (e for e in events if isinstance(e, dict)):
        kind, data = e.get("event"), e.get("data") if isinstance(e.get("data"), dict) else {}
        if kind == "node_finished":
            out.nodes.append(read_node(data, ends))
        elif kind == "workflow_finished":
            out.status = str(data.get("status") or "")
            out.outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
            out.error = str(data["error"]) if data.get("error") else None
        elif kind == "message":
            out.answer = (out.answer or "") + str(e.get("answer") or "")
        elif kind == "message_replace":
            out.answer = str(e.get("answer") or "")
        elif kind == "message_end":
            out.metadata = e.get("metadata") if isinstance(e.get("metadata"), dict) else {}
        elif kind == "error":
            code, message = error_message(e)
            raise EndpointError(f"stream error {code}: {message}", int(number(e.get("status")) or 0), code)
    return out


def failure(run: WorkflowReply) -> str:
    """Why the run gave no answer, naming the node that failed ("" when it succeeded)."""
    failed = next((n for n in run.nodes if n.failed), None)
    if failed is not None:
        return f"node {failed.title!r} ({failed.type}) {failed.status}: {failed.error or 'no error message'}"
    if run.status and run.status != "succeeded":
        return f"the workflow {run.status}: {run.error or 'no error message'}"
    return ""


def node_contexts(nodes: list[Node]) -> list[PlatformContext] | None:
    """The contexts of every knowledge-retrieval node that ran, in flow order, each segment once
    (None: no retrieval node finished, so what was retrieved is unknown)."""
    ran = [n for n in nodes if n.contexts is not None and not n.failed]
    if not ran:
        return None
    seen: dict[str, PlatformContext] = {}
    for n in ran:
        for c in n.contexts or []:
            seen.setdefault(c.id, c)
    return list(seen.values())


def node_usage(nodes: list[Node]) -> tuple[int, int, float]:
    """Tokens in, tokens out and USD cost of the run: each LLM node's ``outputs.usage`` and
    ``execution_metadata.total_price`` (other currencies are not added up)."""
    tokens_in = tokens_out = 0
    for n in nodes:
        usage = n.outputs.get("usage") if isinstance(n.outputs.get("usage"), dict) else {}
        tokens_in += int(number(usage.get("prompt_tokens")) or 0)
        tokens_out += int(number(usage.get("completion_tokens")) or 0)
    return tokens_in, tokens_out, sum(n.cost_usd for n in nodes)


def workflow_reply(run: WorkflowReply, answer: str, contexts: list[PlatformContext] | None, problem: str) -> Reply:
    """The reply of a run whose answer and contexts are known; a failed run has no answer."""
    tokens_in, tokens_out, cost = node_usage(run.nodes)
    if why := failure(run):
        return Reply("", node_contexts(run.nodes), why, tokens_in, tokens_out, cost, run.nodes, failed=True)
    return Reply(answer, contexts, problem if contexts is None else "", tokens_in, tokens_out, cost, run.nodes)


def output_text(outputs: dict[str, Any], name: str) -> str:
    """The workflow's output variable ``name``, which must be text."""
    value = outputs.get(name)
    if not isinstance(value, str):
        have = ", ".join(sorted(outputs)) or "none"
        raise AgentCallError(
            f"the workflow's outputs have no text variable {name!r} (its outputs: {have}); set answer_output"
        )
    return value


#: Roles a run passes through once whatever its branch: a declared title of one is looked for in every run.
TRUNK_ROLES = ("rewrite", "intent", "generation")


def infer_roles(nodes: list[Node], answer: str) -> dict[str, tuple[str, str]]:
    """Node title → (role, why), from node types and how the nodes feed each other. Pure.

    A question classifier is the intent; a knowledge-retrieval node a retrieval; an LLM node whose
    text is a retrieval node's query is the rewrite; the last LLM node whose text is the answer (else
    the last LLM node after a retrieval) is the generation."""
    out: dict[str, tuple[str, str]] = {}
    queries = {str(n.inputs.get("query")) for n in nodes if n.type == RETRIEVAL}
    first_retrieval = min((n.index for n in nodes if n.type == RETRIEVAL), default=None)
    llms = [n for n in nodes if n.type == "llm"]
    for n in nodes:
        if n.type == "question-classifier":
            out[n.title] = ("intent", "question-classifier node")
        elif n.type == RETRIEVAL:
            out[n.title] = ("retrieval", "knowledge-retrieval node")
    for n in llms:
        if isinstance(n.outputs.get("text"), str) and n.outputs["text"] in queries:
            out[n.title] = ("rewrite", "LLM node feeding a retrieval node's query")
    answering = [n for n in llms if answer and n.outputs.get("text") == answer and n.title not in out]
    after = [n for n in llms if first_retrieval is not None and n.index > first_retrieval and n.title not in out]
    if answering:
        out[answering[-1].title] = ("generation", "LLM node producing the answer")
    elif after:
        out[after[-1].title] = ("generation", "last LLM node after retrieval")
    return out


def assign_roles(nodes: list[Node], answer: str, declared: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Node title → (role, why): the roles ``declared`` (role → title) as the version says, the others
    inferred (:func:`infer_roles`); a node inferred for a declared role plays none."""
    inferred = {t: rw for t, rw in infer_roles(nodes, answer).items() if rw[0] not in declared}
    return {**inferred, **{title: (role, "declared") for role, title in declared.items()}}


def missing_roles(nodes: list[Node], declared: dict[str, str]) -> str:
    """One line when a declared rewrite, intent or generation title is no node of the run ("" otherwise):
    those nodes are on every run's path, so the first run tells."""
    titles = list(dict.fromkeys(n.title for n in nodes))
    wrong = [f"{role} = {title!r}" for role, title in declared.items() if role in TRUNK_ROLES and title not in titles]
    if not wrong:
        return ""
    return f"[agent.nodes] {', '.join(wrong)}: the app has no node titled so; its nodes: {', '.join(titles)}"


def check_roles(declared: dict[str, str]) -> dict[str, str]:
    for role in declared:
        NODE_ROLES.check(role)
    return declared
