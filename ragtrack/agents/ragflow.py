"""A RAGFlow chat assistant as an agent version (kind ``ragflow``), and a RAGFlow dataset as a corpus.

The assistant is asked through RAGFlow's OpenAI-compatible endpoint
(``POST /api/v1/chats_openai/{chat_id}/chat/completions``, which every
release since v0.20 serves; ``/api/v1/openai/{chat_id}/...`` when the old
path is gone) with references on — sent both at the top level (v0.20–v0.22)
and inside a literal ``extra_body`` object (v0.23+). The contexts are
``choices[0].message.reference``: a flat list of chunks (``id``, ``content``,
``document_id``, ``document_name``; an object with ``chunks`` is read too).
Citation markers (`` [ID:3]``, counted from 0 over the reference chunks) are
scored by the citation figures and removed from the answer shown and judged:
the RAGFlow UI renders them as links, they are not part of the text.

``retrieval_only = true`` with ``dataset_ids`` measures retrieval alone
through ``POST /api/v1/retrieval`` (``data.chunks[]``).

RAGFlow reports most errors with HTTP 200 and a non-zero ``code`` (and, up to
v0.24, a missing key with ``code`` 0 and ``data: false``): every reply is
checked for both.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from ragtrack.agent import AgentContext, AgentKind, turns_json
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
from ragtrack.agents.endpoint import EndpointError, Rejected, bearer_endpoint
from ragtrack.agents.importer import PAGE_SIZE, SourceDocument, SourceSegment, paged, resolve_datasets
from ragtrack.agents.mapping import PlatformContext
from ragtrack.citation_markers import strip_markers
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import TransientError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

CHAT_PATHS = ("/api/v1/chats_openai/{chat_id}/chat/completions", "/api/v1/openai/{chat_id}/chat/completions")
_SLOW_DOWN = re.compile(r"rate.?limit|too many requests|\b429\b|timed? ?out", re.IGNORECASE)
NO_REFERENCE = (
    "the reply carries no reference, so what was retrieved is unknown: this RAGFlow may predate references "
    "on the OpenAI-compatible endpoint (v0.20), or measure retrieval alone with retrieval_only = true"
)
EMPTY_REFERENCE = (
    "the reply's reference lists no chunk: the assistant has no dataset, or quoting is off in its settings "
    "(or nothing passed the similarity threshold)"
)


class RagflowTable(PlatformTable):
    kind: Literal["ragflow"]
    # RAGFlow marks the chunks an answer cites as [ID:n] (n counts the reference chunks from 0).
    cite_markers: tuple[str, ...] = Field(default=("ragflow",), exclude_if=lambda v: v == ("ragflow",))
    chat_id: str | None = None
    retrieval_only: bool = False
    dataset_ids: list[str] = []  # retrieval_only: the datasets to search
    document_ids: list[str] = []
    # retrieval_only: RAGFlow's own retrieval settings, sent only when set.
    page_size: int | None = Field(default=None, gt=0, le=100)  # chunks returned
    similarity_threshold: float | None = Field(default=None, ge=0, le=1)
    vector_similarity_weight: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, gt=0)  # candidates for vector scoring
    rerank_id: str | None = None

    @field_validator("base_url")
    @classmethod
    def _without_api_prefix(cls, value: str) -> str:
        return value.removesuffix("/api/v1")  # ragtrack adds it; accept it either way

    @model_validator(mode="after")
    def _target(self) -> RagflowTable:
        if self.retrieval_only and not self.dataset_ids:
            raise ValueError("retrieval_only = true needs dataset_ids (the datasets to search)")
        if not self.retrieval_only and not self.chat_id:
            raise ValueError("chat_id is required (the chat assistant to ask), or set retrieval_only = true")
        return self


class RagflowSpec(ExternalSpec):
    agent: RagflowTable


def ragflow_check(status: int, body: Any) -> Exception | None:
    """RAGFlow's envelope: ``code`` != 0 is an error whatever the HTTP status; ``code`` 0 with
    ``data: false`` is a refused key (up to v0.24). A 5xx or 429 status, or its SERVER_ERROR
    code (500), is retried like any endpoint's (:func:`standard_check`), not taken as a refusal."""
    if not isinstance(body, dict) or "code" not in body or status >= 500 or status == 429:
        return None
    code, message = body.get("code"), str(body.get("message") or "")
    if code == 0 and body.get("data") is not False:
        return None
    if _SLOW_DOWN.search(message):
        return TransientError(f"RAGFlow {code}: {message}", overload=True)
    if code == 500:
        return TransientError(f"RAGFlow {code}: {message or 'server error'}")
    return Rejected(status, str(code), message or "refused")


def _not_found(e: EndpointError) -> bool:
    return e.status == 404 or ("not found" in str(e).lower() and e.code in ("100", "404"))


class RagflowAgent(PlatformAgent):
    check = staticmethod(ragflow_check)

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        t: RagflowTable = self.table
        self.retrieves_only = t.retrieval_only
        self.chat_path = CHAT_PATHS[0]  # until a RAGFlow answers 404 to it
        self.top_k = t.page_size if t.retrieval_only else None
        self._check_access()

    def _check_access(self) -> None:
        """One listing before the first question: a refused key, or a chat assistant (datasets, for
        ``retrieval_only``) this key cannot see, would fail every question and leave a logged empty run.
        Best effort: a RAGFlow that lists differently (or not at all) only skips the check."""
        t: RagflowTable = self.table
        if t.retrieval_only:
            probes = [("/api/v1/datasets", d, f"dataset_ids: no dataset {d}") for d in t.dataset_ids]
        else:
            probes = [("/api/v1/chats", t.chat_id, f"chat_id: no chat assistant {t.chat_id}")]
        for path, wanted, missing in probes:
            try:
                listed = self.endpoint.request(
                    "GET", path, params={"id": wanted, "page": 1, "page_size": 1}, usage=Usage(), step="ragflow"
                )
            except EndpointError as e:
                if e.code in ("0", "109") or e.status in (401, 403):
                    raise RagtrackError(
                        f"RAGFlow at {t.base_url}: {e} (is ${t.api_key_env} this RAGFlow's API key?)"
                    ) from None
                if e.code in ("102", "108"):  # "doesn't exist" (≤ v0.24) / "lacks permission" (later)
                    raise RagtrackError(f"RAGFlow at {t.base_url}: {missing} for this key ({e})") from None
                self.unanswered_check("RAGFlow", e)
                return
            if isinstance(listed, dict) and listed.get("data") == []:
                raise RagtrackError(f"RAGFlow at {t.base_url}: {missing} for this key (the listing is empty)")

    def call(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        if self.table.retrieval_only:
            return self._retrieve(question, usage)
        return self._chat(question, usage, history)

    def _chat(self, question: str, usage: Usage, history: Sequence[Turn]) -> Reply:
        """The OpenAI-compatible endpoint keeps no conversation: a follow-up sends the earlier turns as
        the messages before the question, as the OpenAI chat format carries a conversation."""
        body = {
            "model": "model",  # RAGFlow: "the assistant's own LLM"
            "messages": [*turns_json(history), {"role": "user", "content": question}],
            "stream": False,
            "reference": True,
            "extra_body": {"reference": True},
        }
        paths = [self.chat_path, *(p for p in CHAT_PATHS if p != self.chat_path)]
        for n, path in enumerate(paths):
            try:
                reply = self.endpoint.request(
                    "POST", path.format(chat_id=self.table.chat_id), json_body=body, usage=usage, step="ragflow"
                )
            except EndpointError as e:
                if _not_found(e) and n + 1 < len(paths):
                    continue  # this RAGFlow serves the other path
                raise
            self.chat_path = path
            break
        return read_chat(reply)

    def _retrieve(self, question: str, usage: Usage) -> Reply:
        t: RagflowTable = self.table
        body: dict[str, Any] = {"question": question, "dataset_ids": t.dataset_ids, "page": 1, "highlight": False}
        for name in ("document_ids", "page_size", "similarity_threshold", "vector_similarity_weight", "top_k"):
            if getattr(t, name):
                body[name] = getattr(t, name)
        if t.rerank_id:
            body["rerank_id"] = t.rerank_id
        reply = self.endpoint.request("POST", "/api/v1/retrieval", json_body=body, usage=usage, step="ragflow")
        data = reply.get("data") if isinstance(reply, dict) else None
        chunks = data.get("chunks") if isinstance(data, dict) else None
        if not isinstance(chunks, list):
            raise AgentCallError("the retrieval reply has no data.chunks list")
        return Reply("", [chunk_context(c, n) for n, c in enumerate(chunks, start=1) if isinstance(c, dict)])

    def describe(self) -> dict[str, str]:
        t: RagflowTable = self.table
        out = {**super().describe(), "base_url": t.base_url}
        if t.retrieval_only:
            out.update(mode="retrieval_only", dataset_ids=",".join(t.dataset_ids))
        else:
            out.update(mode="chat", chat_id=str(t.chat_id))
        return out


def read_chat(body: Any) -> Reply:
    """An OpenAI-shaped completion with ``message.reference`` → answer, contexts, tokens."""
    choices = body.get("choices") if isinstance(body, dict) else None
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise AgentCallError(f"unexpected reply: {str(body)[:120]!r}")
    answer = str(message.get("content") or "")  # its [ID:n] markers are scored, then taken out (cite_markers)
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    tokens = {"tokens_in": int(number(usage.get("prompt_tokens")) or 0)}
    tokens["tokens_out"] = int(number(usage.get("completion_tokens")) or 0)
    reference = message.get("reference")
    if reference is None:
        return Reply(answer, None, NO_REFERENCE, **tokens)
    chunks = reference.get("chunks") if isinstance(reference, dict) else reference
    if isinstance(chunks, dict):  # the agent endpoint's shape: {"0": {...}, "1": {...}}
        chunks = list(chunks.values())
    chunks = [c for c in chunks or [] if isinstance(c, dict)]
    if not chunks:
        return Reply(answer, None, EMPTY_REFERENCE, **tokens)
    return Reply(answer, [chunk_context(c, n) for n, c in enumerate(chunks, start=1)], **tokens)


def without_citations(answer: str) -> str:
    """An answer without the `` [ID:3]`` markers the RAGFlow UI renders as links to its chunks."""
    return strip_markers(answer, ("ragflow",))


def chunk_context(c: dict, rank: int) -> PlatformContext:
    """A chunk as chat references (``document_name``), retrieval (``document_keyword``) or
    listings (``docnm_kwd``) name its fields."""
    return PlatformContext(
        id=str(first(c, "id", "chunk_id", default=f"chunk@{rank}")),
        text=str(first(c, "content", "content_with_weight", default="")),
        doc_id=str(first(c, "document_id", "doc_id", default="")),
        doc_name=str(first(c, "document_name", "document_keyword", "docnm_kwd", default="")),
        score=number(first(c, "similarity", "score")),
    )


def fetch_knowledge(base_url: str, key: str, datasets: list[str], timeout_s: float) -> list[SourceDocument]:
    """Every enabled document of the named datasets (IDs or names) with its available chunks."""
    base = base_url.removesuffix("/api/v1")  # ragtrack adds it
    endpoint = bearer_endpoint(base, key, timeout_s=timeout_s, max_concurrency=2, check=ragflow_check)
    usage = Usage()

    def listing(path: str, items_key: str | None):
        def fetch(page: int) -> tuple[list, bool]:
            params = {"page": page, "page_size": PAGE_SIZE}
            reply = endpoint.request("GET", path, params=params, usage=usage, step="import")
            reply = reply if isinstance(reply, dict) else {}
            if items_key is None:  # the dataset list: data is the list, its total sits beside it
                items, total = reply.get("data"), reply.get("total_datasets")
            else:
                data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
                items, total = data.get(items_key), data.get("total")
            total = number(total)
            return [x for x in items or [] if isinstance(x, dict)], total is None or page * PAGE_SIZE < total

        return paged(fetch)

    try:
        available = [(str(d.get("id")), str(d.get("name"))) for d in listing("/api/v1/datasets", None)]
        out = []
        for dataset_id, dataset_name in resolve_datasets(datasets, available, "RAGFlow"):
            for doc in listing(f"/api/v1/datasets/{dataset_id}/documents", "docs"):
                if str(doc.get("status", "1")) == "0":
                    continue  # a disabled document is never retrieved
                source = SourceDocument(
                    dataset_id, dataset_name, str(doc.get("id")), str(doc.get("name") or doc.get("id"))
                )
                chunks = listing(f"/api/v1/datasets/{dataset_id}/documents/{source.id}/chunks", "chunks")
                for n, chunk in enumerate(chunks, start=1):
                    if chunk.get("available") is not False:
                        source.segments.append(SourceSegment(str(chunk.get("id")), n, str(chunk.get("content") or "")))
                out.append(source)
    except EndpointError as e:
        raise RagtrackError(f"RAGFlow at {base_url}: {e}") from None
    return out


KIND = AgentKind("ragflow", RagflowSpec, RagflowAgent, declared_files)
