"""A Dify app as an agent version (kind ``dify``), and a Dify knowledge base as a corpus.

The app is asked through Dify's Service API with its app key:
``POST {base_url}/chat-messages`` (chat, advanced-chat and agent-chat apps),
``/completion-messages`` (``app_mode = "completion"``) or ``/workflows/run``
(``app_mode = "workflow"``). Chat and completion apps are asked blocking: the
answer is ``answer``, the contexts ``metadata.retriever_resources`` in
``position`` order, ``metadata.usage`` (tokens; prices are decimal strings,
counted when the currency is USD) goes into the accounting. Agent-chat apps
refuse blocking mode: the client then streams and assembles the events.

Workflows and chatflows (``advanced-chat``) are streamed so that every node is
kept (:mod:`.workflow`): each becomes a span of the item's trace; the contexts
are what their knowledge-retrieval nodes returned; the answer is the output
variable ``answer_output`` (default ``answer``) of a workflow, the answer of a
chatflow; a failed node is a per-item error that names it.
``response_mode = "blocking"`` asks them blocking instead: no nodes, the
contexts from the workflow's output variable ``contexts_output`` (a chatflow's
``retriever_resources``).

A reply without ``retriever_resources`` (citations switched off, a chatflow
whose LLM node is not fed by a Knowledge Retrieval node, an old Dify, a
web-app token's reduced shape) is a per-item error — never a recall of 0.
Recent Dify versions also merge the citations of one document into one
resource; ``retrieval_only = true`` measures the knowledge base's own ranked
retrieval (``POST /datasets/{dataset_id}/retrieve``, a dataset key) instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from ragtrack.agent import AgentContext, AgentKind, transcript
from ragtrack.agents.base import (
    AgentCallError,
    ExternalSpec,
    PlatformAgent,
    PlatformTable,
    Reply,
    declared_files,
    first,
    number,
)
from ragtrack.agents.endpoint import EndpointError, bearer_endpoint, error_message
from ragtrack.agents.importer import PAGE_SIZE, SourceDocument, SourceSegment, paged, resolve_datasets
from ragtrack.agents.mapping import PlatformContext
from ragtrack.agents.workflow import (
    WorkflowReply,
    assign_roles,
    check_roles,
    missing_roles,
    node_contexts,
    output_text,
    read_events,
    result_contexts,
    workflow_reply,
)
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import TransientError
from ragtrack.llm.client import EndpointRefusedError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

SEARCH_METHODS = Literal["semantic_search", "full_text_search", "hybrid_search", "keyword_search"]
NO_METADATA = (
    "the reply carries no metadata (a web-app token or an old Dify answers with a reduced shape): use the app's API key"
)
NO_RETRIEVAL_NODE = (
    "no knowledge-retrieval node ran, so what was retrieved is unknown (a branch without one, or a "
    "workflow that retrieves through a tool or HTTP node)"
)
NO_CONTEXTS_OUTPUT = (
    "blocking mode returns the workflow's outputs only: name the output variable holding the Knowledge "
    "Retrieval node's result with contexts_output, or stream (the default) to read every node"
)
NO_RESOURCES = (
    "the reply lists no metadata.retriever_resources, so what was retrieved is unknown: turn on "
    "'Citations and Attributions' in the app's features (chatflow: feed the LLM node's context from a "
    "Knowledge Retrieval node), or measure retrieval alone with retrieval_only = true"
)


class DifyTable(PlatformTable):
    kind: Literal["dify"]
    app_mode: Literal["chat", "advanced-chat", "agent-chat", "completion", "workflow"] = "chat"
    # Workflows and chatflows stream (every node is kept); "blocking" asks for the outputs alone. The new
    # keys are left out of the spec's dump while unset: adding them changed no existing spec's hash.
    response_mode: Literal["streaming", "blocking"] | None = Field(default=None, exclude_if=lambda v: v is None)
    answer_output: str | None = Field(default=None, exclude_if=lambda v: v is None)  # workflow: default "answer"
    contexts_output: str | None = Field(default=None, exclude_if=lambda v: v is None)  # blocking workflow
    # [agent.nodes]: role → node title (rewrite = "问题改写"); roles not named are inferred from node types.
    nodes: dict[str, str] = Field(default_factory=dict, exclude_if=lambda v: not v)

    @field_validator("nodes")
    @classmethod
    def _known_roles(cls, nodes: dict[str, str]) -> dict[str, str]:
        return check_roles(nodes)

    user: str = "ragtrack"  # Dify requires an end-user ID
    inputs: dict[str, str | int | float | bool] = {}  # the app's variables
    # The input variable a completion app's prompt reads the question from (default "query", Dify's
    # template: a completion app has no query field); chat apps may take it too.
    query_input: str | None = None
    # A follow-up's earlier turns: chat apps replay the user turns in one conversation before the
    # question; with history_input set, the turns go as text into that input variable instead (the
    # only way for a completion app). Left out of the spec's dump while unset (specs keep their hash).
    history_input: str | None = Field(default=None, exclude_if=lambda v: v is None)
    retrieval_only: bool = False
    dataset_id: str | None = None  # retrieval_only: the knowledge base (api_key_env then names a dataset key)
    top_k: int | None = Field(default=None, gt=0)  # retrieval_only: sent with search_method as retrieval_model
    search_method: SEARCH_METHODS | None = None

    @model_validator(mode="after")
    def _retrieval_keys(self) -> DifyTable:
        if self.retrieval_only and not self.dataset_id:
            raise ValueError("retrieval_only = true needs dataset_id (the knowledge base to query)")
        if not self.retrieval_only and (self.top_k or self.search_method):
            raise ValueError("top_k and search_method apply to retrieval_only = true; an app uses its own settings")
        if self.app_mode != "workflow" and (self.answer_output or self.contexts_output):
            raise ValueError('answer_output and contexts_output name a workflow\'s outputs: app_mode = "workflow"')
        if self.nodes and self.app_mode not in ("workflow", "advanced-chat"):
            raise ValueError('[agent.nodes] names nodes of a workflow: app_mode = "workflow" or "advanced-chat"')
        if self.response_mode and self.app_mode not in ("workflow", "advanced-chat"):
            raise ValueError('response_mode applies to app_mode = "workflow" and "advanced-chat"')
        return self

    @property
    def streams(self) -> bool:
        """Workflows and chatflows stream unless told otherwise (agent-chat apps switch on their own)."""
        return self.app_mode in ("workflow", "advanced-chat") and self.response_mode != "blocking"


class DifySpec(ExternalSpec):
    agent: DifyTable


def dify_check(status: int, body: Any) -> Exception | None:
    """Dify Cloud answers its knowledge rate limit with 403, not 429: retry it, and slow down."""
    if status == 403 and "rate limit" in error_message(body)[1].lower():
        return TransientError(f"HTTP 403: {error_message(body)[1]}", overload=True)
    return None


class DifyAgent(PlatformAgent):
    check = staticmethod(dify_check)

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        t: DifyTable = self.table
        self.retrieves_only = t.retrieval_only
        self.streaming = t.app_mode == "agent-chat" or t.streams
        self.top_k = t.top_k
        self.app = self._check_dataset_key() if t.retrieval_only else self._app_info()

    def _app_info(self) -> dict[str, str]:
        """The app's name (and, in recent Dify versions, mode) from ``GET /info``, to log which app ran.
        Best effort: an older Dify without it, or a failure here, only leaves the param out — except a
        refused key, which would fail every question: that stops the eval before it starts."""
        t: DifyTable = self.table
        try:
            info = self.endpoint.request("GET", "/info", usage=Usage(), step="dify")
        except EndpointError as e:
            if e.status in (401, 403):
                raise RagtrackError(f"Dify at {t.base_url}: {e} (is ${t.api_key_env} the app's API key?)") from None
            if e.status == 404 and not t.base_url.rstrip("/").endswith("/v1"):
                raise RagtrackError(f"Dify at {t.base_url}: {e} (its API lives under /v1)") from None
            self.unanswered_check("Dify", e)
            return {}
        info = info if isinstance(info, dict) else {}
        reported = info.get("mode")
        route = {"completion": "completion", "workflow": "workflow"}
        if isinstance(reported, str) and route.get(reported, "chat") != route.get(t.app_mode, "chat"):
            # Each question would fail on the other endpoint (/chat-messages, /completion-messages,
            # /workflows/run answer 400 to another mode's app).
            wanted = route.get(reported, "advanced-chat" if reported == "advanced-chat" else "chat")
            raise RagtrackError(
                f"Dify at {t.base_url}: the app is a {reported} app, the spec says app_mode = {t.app_mode!r}; "
                f"set app_mode = {wanted!r}"
            )
        names = {"name": "name", "mode": "mode_reported"}
        return {names[k]: str(info[k]) for k in names if isinstance(info.get(k), str)}

    def _check_dataset_key(self) -> dict[str, str]:
        """``retrieval_only`` asks with a knowledge-base key: one ``GET /datasets/{dataset_id}/documents``
        first, so that an app key, a mistyped dataset_id (or a base URL without ``/v1``) stops the eval
        before it starts, not after eight refused questions and a logged empty run."""
        t: DifyTable = self.table
        try:
            self.endpoint.request(
                "GET", f"/datasets/{t.dataset_id}/documents", params={"page": 1, "limit": 1}, usage=Usage(), step="dify"
            )
        except EndpointError as e:
            if e.status in (401, 403):
                raise RagtrackError(
                    f"Dify at {t.base_url}: {e} (retrieval_only needs a knowledge-base API key, dataset-…: "
                    f"is ${t.api_key_env} one?)"
                ) from None
            if e.status == 404 and not t.base_url.rstrip("/").endswith("/v1"):
                raise RagtrackError(f"Dify at {t.base_url}: {e} (its API lives under /v1)") from None
            if e.status == 404:
                raise RagtrackError(
                    f"Dify at {t.base_url}: dataset_id: no knowledge base {t.dataset_id} for this key ({e})"
                ) from None
            self.unanswered_check("Dify", e)
        return {}

    def node_roles(self, reply: Reply) -> dict[str, tuple[str, str]]:
        """The version's ``[agent.nodes]`` and the roles inferred for the rest; a declared rewrite,
        intent or generation title no node of the run has stops the eval, listing the app's nodes."""
        declared = self.table.nodes
        if declared and not reply.failed and (problem := missing_roles(reply.nodes, declared)):
            raise EndpointRefusedError(problem)
        return assign_roles(reply.nodes, reply.answer, declared)

    def call(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        if self.table.retrieval_only:
            return self._retrieve(question, usage)
        t: DifyTable = self.table
        inputs: dict[str, Any] = {}
        conversation = ""
        if history and t.history_input:
            inputs[t.history_input] = transcript(history)
        elif history and t.app_mode in ("completion", "workflow"):
            raise AgentCallError(
                f"a follow-up item (history) on a {t.app_mode} app, which keeps no conversation: set "
                "history_input to the input variable its prompt reads the earlier turns from"
            )
        else:
            for turn in (turn for turn in history if turn.role == "user"):
                _, conversation = self._message(turn.content, usage, {}, conversation)
                if not conversation:
                    raise AgentCallError("replaying the conversation: the reply carries no conversation_id")
        reply, _ = self._message(question, usage, inputs, conversation)
        return reply

    def _message(self, question: str, usage: Usage, inputs: dict[str, Any], conversation: str) -> tuple[Reply, str]:
        """One message to the app (in ``conversation`` when it is not ""): its reply, and the conversation
        it went into ("" for a workflow run, which has none)."""
        t: DifyTable = self.table
        if t.app_mode == "workflow":
            return self._workflow(question, usage, inputs), ""
        variable = t.query_input or ("query" if t.app_mode == "completion" else None)
        inputs = {**t.inputs, **inputs, **({variable: question} if variable else {})}
        body = {"inputs": inputs, "query": question, "user": t.user, "response_mode": "blocking"}
        if conversation:
            body["conversation_id"] = conversation
        path = "/completion-messages" if t.app_mode == "completion" else "/chat-messages"
        if not self.streaming:
            try:
                reply = self.endpoint.request("POST", path, json_body=body, usage=usage, step="dify")
                if not isinstance(reply, dict):
                    raise AgentCallError(f"unexpected reply: {str(reply)[:120]!r}")
                return read_message(reply), str(reply.get("conversation_id") or "")
            except EndpointError as e:
                if not (e.status == 400 and "blocking mode" in str(e)):
                    raise
                self.streaming = True  # an agent-chat app: it answers in streaming mode only
        body["response_mode"] = "streaming"
        events = self.endpoint.request("POST", path, json_body=body, usage=usage, step="dify", events=True)
        if t.app_mode != "advanced-chat":
            return read_message(assemble(events)), conversation_of(events)
        run = read_events(events)  # a chatflow: its nodes, and the message the answer node streamed
        if run.answer is None and not run.nodes:
            raise AgentCallError("the stream carried no message and no node events")
        message = read_message({"answer": run.answer or "", "metadata": run.metadata}) if run.metadata else None
        contexts = node_contexts(run.nodes)
        if contexts is None and message is not None:  # no retrieval node reported: the citations, if any
            contexts = message.contexts
        problem = message.problem if message is not None else NO_RETRIEVAL_NODE
        return workflow_reply(run, run.answer or "", contexts, problem), conversation_of(events)

    def _workflow(self, question: str, usage: Usage, extra: dict[str, Any]) -> Reply:
        """``POST /workflows/run`` with the question in the input ``query_input`` (default ``query``)
        (and a follow-up's turns in ``history_input``, in ``extra``)."""
        t: DifyTable = self.table
        inputs = {**t.inputs, **extra, t.query_input or "query": question}
        body = {"inputs": inputs, "user": t.user, "response_mode": "streaming" if self.streaming else "blocking"}
        answer_output = t.answer_output or "answer"
        if not self.streaming:
            reply = self.endpoint.request("POST", "/workflows/run", json_body=body, usage=usage, step="dify")
            data = reply.get("data") if isinstance(reply, dict) else None
            if not isinstance(data, dict):
                raise AgentCallError(f"unexpected reply: {str(reply)[:120]!r}")
            outputs = data.get("outputs") if isinstance(data.get("outputs"), dict) else {}
            run = WorkflowReply(status=str(data.get("status") or ""), outputs=outputs, error=data.get("error"))
            if run.status != "succeeded":
                return workflow_reply(run, "", None, "")
            contexts = None
            if t.contexts_output and isinstance(outputs.get(t.contexts_output), list):
                contexts = result_contexts(outputs[t.contexts_output])
            return workflow_reply(run, output_text(outputs, answer_output), contexts, NO_CONTEXTS_OUTPUT)
        events = self.endpoint.request("POST", "/workflows/run", json_body=body, usage=usage, step="dify", events=True)
        run = read_events(events)
        if not run.status:
            raise AgentCallError("the stream ended before workflow_finished (the run's outcome is unknown)")
        answer = "" if run.status != "succeeded" else output_text(run.outputs, answer_output)
        return workflow_reply(run, answer, node_contexts(run.nodes), NO_RETRIEVAL_NODE)

    def _retrieve(self, question: str, usage: Usage) -> Reply:
        t: DifyTable = self.table
        body: dict[str, Any] = {"query": question}
        if t.top_k or t.search_method:  # otherwise the knowledge base's saved retrieval settings apply
            body["retrieval_model"] = {
                "search_method": t.search_method or "semantic_search",
                "reranking_enable": False,
                "top_k": t.top_k or 4,
                "score_threshold_enabled": False,
            }
        reply = self.endpoint.request(
            "POST", f"/datasets/{t.dataset_id}/retrieve", json_body=body, usage=usage, step="dify"
        )
        records = reply.get("records") if isinstance(reply, dict) else None
        if not isinstance(records, list):
            raise AgentCallError("the retrieve reply has no records list")
        return Reply("", [_record_context(r, n) for n, r in enumerate(records, start=1) if isinstance(r, dict)])

    def describe(self) -> dict[str, str]:
        t: DifyTable = self.table
        out = {
            **super().describe(),
            "base_url": t.base_url,
            "app_mode": "retrieval_only" if t.retrieval_only else t.app_mode,
        }
        if t.app_mode in ("workflow", "advanced-chat"):
            out["response_mode"] = "streaming" if t.streams else "blocking"
        if t.app_mode == "workflow":
            out["answer_output"] = t.answer_output or "answer"
        if t.dataset_id:
            out["dataset_id"] = t.dataset_id
        out.update({f"app_{k}": v for k, v in self.app.items()})  # app_name, app_mode_reported
        return out


def assemble(events: list[Any]) -> dict[str, Any]:
    """A streamed reply → the blocking shape: answer deltas joined, metadata from ``message_end``."""
    answer, metadata = "", None
    for e in (e for e in events if isinstance(e, dict)):
        kind = e.get("event")
        if kind in ("message", "agent_message"):
            answer += str(e.get("answer") or "")
        elif kind == "message_replace":  # moderation replaced the answer
            answer = str(e.get("answer") or "")
        elif kind == "message_end":
            metadata = e.get("metadata")
        elif kind == "error":
            code, message = error_message(e)
            raise EndpointError(f"stream error {code}: {message}", int(number(e.get("status")) or 0), code)
    return {"answer": answer, **({"metadata": metadata} if metadata is not None else {})}


def conversation_of(events: list[Any]) -> str:
    """The conversation a streamed chat reply went into (every message event names it)."""
    return next((str(e["conversation_id"]) for e in events if isinstance(e, dict) and e.get("conversation_id")), "")


def read_message(body: Any) -> Reply:
    """A chat/completion reply → answer, contexts in ``position`` order, tokens and USD cost."""
    if not isinstance(body, dict):
        raise AgentCallError(f"unexpected reply: {str(body)[:120]!r}")
    answer = body.get("answer")
    if not isinstance(answer, str):  # a proxy or an app that broke the shape: not an empty answer to judge
        raise AgentCallError(f"the reply has no answer text (answer: {str(answer)[:40]})")
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        return Reply(answer, None, NO_METADATA)
    usage = metadata.get("usage") if isinstance(metadata.get("usage"), dict) else {}
    cost = number(usage.get("total_price")) if usage.get("currency", "USD") == "USD" else None
    reply = Reply(
        answer,
        None,
        NO_RESOURCES,
        tokens_in=int(number(usage.get("prompt_tokens")) or 0),
        tokens_out=int(number(usage.get("completion_tokens")) or 0),
        cost_usd=cost or 0.0,
    )
    if contexts := resource_contexts(metadata.get("retriever_resources")):
        # (an empty list is what citations switched off look like in recent Dify versions)
        reply.contexts = contexts
        reply.problem = ""
    return reply


def resource_contexts(resources: Any) -> list[PlatformContext]:
    """Dify's ``retriever_resources`` (a reply's metadata, a listed message) as contexts, in ``position`` order."""
    resources = [r for r in resources or [] if isinstance(r, dict)]
    ranked = sorted(enumerate(resources), key=lambda nr: (number(nr[1].get("position")) or nr[0] + 1, nr[0]))
    return [_resource_context(r, n) for n, (_, r) in enumerate(ranked, start=1)]


def _resource_context(r: dict, rank: int) -> PlatformContext:
    doc = str(r.get("document_id") or "")
    return PlatformContext(
        id=str(r.get("segment_id") or f"{doc or 'resource'}@{rank}"),  # external knowledge: no segment ID
        text=str(r.get("content") or ""),
        doc_id=doc,
        doc_name=str(r.get("document_name") or ""),
        score=number(r.get("score")),
    )


def _record_context(record: dict, rank: int) -> PlatformContext:
    """A retrieve record: ``{segment: {...}, score}``, or an external knowledge base's ``{content, title, ...}``."""
    seg = record.get("segment")
    if not isinstance(seg, dict):
        meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        name = str(record.get("title") or "")
        doc = str(meta.get("document_id") or name)
        return PlatformContext(
            f"{doc}@{rank}", str(record.get("content") or ""), doc, name, number(record.get("score"))
        )
    doc = seg.get("document") if isinstance(seg.get("document"), dict) else {}
    text = str(seg.get("content") or "")
    if seg.get("answer"):  # a Q&A-mode knowledge base: the question is the content
        text += "\n" + str(seg["answer"])
    return PlatformContext(
        id=str(seg.get("id") or f"segment@{rank}"),
        text=text,
        doc_id=str(first(seg, "document_id", default="") or doc.get("id") or ""),
        doc_name=str(doc.get("name") or ""),
        score=number(record.get("score")),
    )


def fetch_knowledge(base_url: str, key: str, datasets: list[str], timeout_s: float) -> list[SourceDocument]:
    """Every enabled document of the named knowledge bases (IDs or names) with its enabled segments."""
    endpoint = bearer_endpoint(base_url, key, timeout_s=timeout_s, max_concurrency=2, check=dify_check)
    usage = Usage()

    def get(path: str, page: int) -> dict:
        reply = endpoint.request("GET", path, params={"page": page, "limit": PAGE_SIZE}, usage=usage, step="import")
        return reply if isinstance(reply, dict) else {}

    def listing(path: str):
        def fetch(page: int) -> tuple[list, bool]:
            reply = get(path, page)
            items = [x for x in reply.get("data") or [] if isinstance(x, dict)]
            total = number(reply.get("total"))
            more = bool(reply.get("has_more")) and (total is None or page * PAGE_SIZE < total)
            return items, more

        return paged(fetch)

    try:
        available = [(str(d.get("id")), str(d.get("name"))) for d in listing("/datasets")]
        out = []
        for dataset_id, dataset_name in resolve_datasets(datasets, available, "Dify"):
            for doc in listing(f"/datasets/{dataset_id}/documents"):
                if doc.get("enabled") is False or doc.get("archived"):
                    continue  # never retrieved, so never a GT passage
                source = SourceDocument(
                    dataset_id, dataset_name, str(doc.get("id")), str(doc.get("name") or doc.get("id"))
                )
                for n, seg in enumerate(listing(f"/datasets/{dataset_id}/documents/{source.id}/segments"), start=1):
                    if seg.get("enabled") is False:
                        continue
                    text = str(seg.get("content") or "") + (f"\n{seg['answer']}" if seg.get("answer") else "")
                    position = int(number(seg.get("position")) or n)
                    source.segments.append(SourceSegment(str(seg.get("id")), position, text))
                out.append(source)
    except EndpointError as e:
        hint = ""
        if e.status in (401, 403):
            hint = " (importing needs a knowledge-base API key, dataset-…, from Knowledge → Service API)"
        elif e.status == 404 and not base_url.rstrip("/").endswith("/v1"):
            hint = " (Dify's API lives under /v1: is --base-url missing it?)"
        raise RagtrackError(f"Dify at {base_url}: {e}{hint}") from None
    return out


KIND = AgentKind("dify", DifySpec, DifyAgent, declared_files)
