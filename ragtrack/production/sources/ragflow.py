"""``--from ragflow --version NAME``: a RAGFlow chat assistant's sessions, every answered question.

The version spec (``kind = "ragflow"``, with its ``chat_id``) gives the base URL and the key, as
``eval`` uses them. ``GET /api/v1/chats/{chat_id}/sessions`` lists the assistant's sessions, most
recently updated first (``orderby=update_time``), each with its ``messages``: a user's question, then
the assistant's answer with the same ``id``; an answer the user rated has ``thumbup`` (true: like,
false: dislike) and, for a dislike, the user's ``feedback``. What each answer was given from is its
``reference``: the session's ``reference`` list holds one entry of ``chunks`` per answer, in order
(RAGFlow since its RESTful sessions API); the SDK listing of v0.2x attached them to the messages
instead, handing them out in order to every non-user message, the opening greeting included — so
the references are read in order and paired with the answers in order, which is right either way.

Rating a message updates its session's ``update_time``, so the next pull reads the sessions updated
since the last one (the cursor), re-reads their messages and re-rates what changed. Every session
is visible to the API key: the whole traffic (coverage ``all``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from ragtrack.agents.endpoint import EndpointError
from ragtrack.agents.ragflow import chunk_context, ragflow_check, without_citations
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.production import fields
from ragtrack.production.fields import FieldError
from ragtrack.production.sources import Batch, Pages, PulledMessage, SourceRequest, UserFeedback, expect
from ragtrack.production.sources.dify import load_platform_spec, spec_endpoint

PAGE = 100  # sessions per page


class RagflowSource:
    name = "ragflow"
    coverage = "all"

    def __init__(self, endpoint, chat_id: str, app: str):
        self.endpoint, self.chat_id, self.app = endpoint, chat_id, app
        self.usage = Usage()

    def _page(self, page: int) -> list[dict]:
        """One page of sessions, each in the shape RAGFlow's HTTP API reference gives it, or an error."""
        path = f"/api/v1/chats/{fields.path_segment(self.chat_id)}/sessions"
        params = {"page": page, "page_size": PAGE, "orderby": "update_time", "desc": "true"}
        try:
            reply = self.endpoint.request("GET", path, params=params, usage=self.usage, step="logs")
        except EndpointError as e:
            hint = " (is the key this RAGFlow's, and chat_id its assistant's?)" if e.code in ("0", "102", "109") else ""
            raise RagtrackError(f"RAGFlow at {self.endpoint.base_url}: {path}: {e}{hint}") from None
        at = f"RAGFlow at {self.endpoint.base_url}: {path} page {page}"
        data = expect(expect(reply, dict, at, "the reply").get("data"), list, at, "data")
        for n, session in enumerate(data):
            where = f"{at}: data[{n}]"
            expect(session, dict, where, "the session")
            expect(session.get("messages"), (list, type(None)), where, "messages")
        return data

    def batches(self, cursor: dict, known: Callable[[str], bool], progress: Callable[[str], None]) -> Iterator[Batch]:
        self.endpoint.notice = progress
        since, ignored = fields.cursor_ms(cursor, "update_time")  # sessions updated before it were read whole
        if ignored:
            progress(f"{self.app}: the saved cursor is ignored ({ignored}): reading every session again")
        newest, read = since, 0
        pages = Pages(f"RAGFlow at {self.endpoint.base_url}: /api/v1/chats/{self.chat_id}/sessions")
        while True:
            sessions = self._page(pages.pages + 1)
            # A session updated while the pull pages moves to the top and is listed again further down:
            # read once (a page of nothing but repeats stops the pull).
            again = pages.new([str(s.get("id")) for s in sessions])
            skipped: Counter[str] = Counter()
            readable = []  # (session, its update_time in ms): those whose ID and time are values
            for s in sessions:
                try:
                    fields.field(s, "id", fields.identifier)
                    readable.append((s, fields.field(s, "update_time", fields.unix_ms)))
                except FieldError as e:
                    skipped[e.skip("sessions")] += 1
            fresh = [(s, at) for s, at in readable if str(s["id"]) in again and at >= since]
            messages = [m for s, _ in fresh for m in session_messages(s, skipped)]
            read += len(fresh)
            newest = max([newest, *(at for _, at in fresh)])
            progress(f"{self.app}: {read} sessions read")
            yield Batch(messages=messages, pulled=len(messages), unresolved=skipped)
            if any(at < since for _, at in readable) or len(sessions) < PAGE:
                break
        # The newest update seen: the sessions listed after it (older) were all read. Saved only now,
        # since the listing is newest first, a pull stopped half way must read them again.
        yield Batch(cursor={"update_time": newest})


def session_messages(session: dict, skipped: Counter[str]) -> list[PulledMessage]:
    """A session's answered questions: each user message with the assistant answer that follows it.
    An answer with a field that is no value is left out, and a rating that is none dropped, each
    counted in ``skipped`` by field."""
    messages = [m for m in session.get("messages") or [] if isinstance(m, dict)]
    references = _references(session, messages)
    out = []
    answered = 0
    session_id = fields.field(session, "id", fields.identifier)
    for n, m in enumerate(messages):
        if m.get("role") != "assistant" or n == 0 or messages[n - 1].get("role") != "user":
            continue  # the opening greeting, or an assistant message that answers nothing
        question = messages[n - 1]
        chunks = references[answered] if answered < len(references) else []
        answered += 1
        try:
            message = PulledMessage(
                message_id=fields.field(m, "id", fields.identifier) if m.get("id") else f"{session_id}#{answered}",
                question=fields.field(question, "content", fields.text)[0],
                answer=without_citations(fields.field(m, "content", fields.text)[0]),
                created_at=_created(m, question, session),
                contexts=[chunk_context(c, rank) for rank, c in enumerate(chunks, start=1)],
                conversation_id=session_id,
                user=fields.field(session, "user_id", fields.text)[0] or None,
            )
        except FieldError as e:
            skipped[e.skip("answers")] += 1
            continue
        try:
            rating = fields.field(m, "thumbup", fields.thumb)
            comment = fields.field(m, "feedback", fields.text)[0] if rating == "dislike" else ""
        except FieldError as e:
            skipped[e.skip("ratings")] += 1
            rating = None
        message.feedback = UserFeedback(rating, comment or None) if rating else None
        out.append(message)
    return out


def _created(answer: dict, question: dict, session: dict) -> str:
    """When the answer was given: its own ``created_at``, else its question's, else the session's
    ``create_time`` — the first that is there, which must be a time."""
    for name, record in (("created_at", answer), ("created_at", question), ("create_time", session)):
        if record.get(name) is not None:
            return fields.field(record, name, fields.timestamp)
    raise FieldError("absent (no created_at, nor the session's create_time)", None, "created_at")


def _references(session: dict, messages: list[dict]) -> list[list[dict]]:
    """The chunks of each answer, in order: the session's ``reference`` list (one ``{"chunks": …}`` per
    answer), or the references the v0.2x listing attached to its non-user messages, in order."""
    if isinstance(session.get("reference"), list):
        entries: list[Any] = session["reference"]
    else:
        entries = [m["reference"] for m in messages if m.get("role") != "user" and "reference" in m]
    out = []
    for entry in entries:
        chunks = entry.get("chunks") if isinstance(entry, dict) else entry
        out.append([c for c in chunks or [] if isinstance(c, dict)])
    return out


def open_source(request: SourceRequest) -> RagflowSource:
    spec = load_platform_spec(request, "ragflow")
    table = spec.spec.agent
    if table.retrieval_only:
        raise RagtrackError(f"--version {spec.name}: a retrieval_only spec names no chat assistant (chat_id)")
    return RagflowSource(spec_endpoint(spec, request, ragflow_check), str(table.chat_id), request.app or spec.name)
