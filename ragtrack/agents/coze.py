"""A Coze bot as an agent version (kind ``coze``): on coze.cn, coze.com or a self-hosted Coze Studio.

The bot is asked through Coze's chat API v3 without streaming, the way its
documentation describes that mode: ``POST /v3/chat`` (each question in a new
conversation, with history saved, which a non-streaming chat requires), then
``GET /v3/chat/retrieve`` every ``poll_interval_s`` until the chat is no longer
running, then ``GET /v3/chat/message/list`` for what it said. The answer is the
text of its ``answer`` messages. The contexts are the chunks of its knowledge
recall: a message whose content is ``{"msg_type": "knowledge_recall", "data":
"<JSON>"}`` (type ``verbose`` on coze.cn, ``knowledge`` on Coze Studio), the
data holding ``chunks`` of ``slice`` text, ``score`` and ``meta.document``.
Slices carry no chunk ID, so they are mapped to passages by their text.

A chat whose messages carry no knowledge recall (a bot without a knowledge
base, or one that did not search it) is a per-item error — never a recall of
0 — and the item is judged on its answer alone.

Coze reports an error as ``code`` != 0 with ``msg``, and a chat that failed as
``status: failed`` with ``last_error``.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import unicodedata
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from ragtrack.agent import AgentContext, AgentKind
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
from ragtrack.agents.endpoint import EndpointError, Rejected
from ragtrack.agents.mapping import PlatformContext
from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import TransientError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

RUNNING = ("created", "in_progress")
RATE_LIMITED = "4013"  # Coze's "requests too frequent"
AUTH_FAILED = ("4100", "4101")  # the token is invalid; the token lacks a permission
_SLOW_DOWN = re.compile(r"rate.?limit|too many requests|frequen|\b429\b", re.IGNORECASE)
NO_RECALL = (
    "the chat's messages carry no knowledge recall, so what was retrieved is unknown: give the bot a "
    "knowledge base and let it search on every question (auto-call), or check that it answered from it"
)


class CozeTable(PlatformTable):
    kind: Literal["coze"]
    bot_id: str  # the number in the bot's URL: …/space/<space>/bot/<bot_id>
    user_id: str = "ragtrack"  # Coze requires one: who is asking
    # Coze asks clients to check a chat's status at most once a second.
    poll_interval_s: float = Field(default=1.0, gt=0)
    custom_variables: dict[str, str] = {}  # the bot's prompt variables, if it has any

    @field_validator("bot_id", mode="before")
    @classmethod
    def _numeric(cls, value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # TOML reads an unquoted ID as a number
        if isinstance(value, str):
            value = unicodedata.normalize("NFKC", value).strip()  # full-width digits, as a Chinese IME types them
        if not (isinstance(value, str) and value.isascii() and value.isdigit()):
            raise ValueError(f"a Coze bot ID is a number (the one in the bot's URL, …/bot/<bot_id>), got {value!r}")
        return value

    @field_validator("base_url")
    @classmethod
    def _without_api_version(cls, value: str) -> str:
        return value.removesuffix("/v3").removesuffix("/v1")  # ragtrack adds them; accept them either way


class CozeSpec(ExternalSpec):
    agent: CozeTable


def coze_check(status: int, body: Any) -> Exception | None:
    """Coze's envelope: ``code`` != 0 is an error, whatever the HTTP status; a rate limit is retried
    (and slows the client down). 5xx and 429 statuses are left to :func:`standard_check`."""
    if not isinstance(body, dict) or "code" not in body or status >= 500 or status == 429:
        return None
    code, message = str(body.get("code")), str(body.get("msg") or body.get("message") or "")
    if code == "0":
        return None
    if code == RATE_LIMITED or _SLOW_DOWN.search(message):
        return TransientError(f"Coze {code}: {message}", overload=True)
    return Rejected(status, code, message or "refused")


class CozeAgent(PlatformAgent):
    check = staticmethod(coze_check)

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        self._abandoned = threading.Event()
        self.bot = self._bot_info()

    def _bot_info(self) -> dict[str, str]:
        """The bot's name, to log which bot ran, and a check before the first question: a refused token or
        an unknown bot would fail every question and leave a logged empty run. Asked at ``GET
        /v1/bots/{bot_id}``, else (a Coze without that route) the older ``GET /v1/bot/get_online_info``;
        a token without the permission to read bots only skips the check."""
        t: CozeTable = self.table
        for path, params in (
            (f"/v1/bots/{t.bot_id}", None),
            ("/v1/bot/get_online_info", {"bot_id": t.bot_id}),
        ):
            try:
                info = self.endpoint.request("GET", path, params=params, usage=Usage(), step="coze")
            except EndpointError as e:
                if e.code == AUTH_FAILED[0] or e.status == 401:
                    raise RagtrackError(
                        f"Coze at {t.base_url}: {e} (is ${t.api_key_env} a token of this Coze?)"
                    ) from None
                if e.code == AUTH_FAILED[1] or e.status == 403:
                    return {}  # a token for chats only
                if e.status == 404 and e.code in ("", "404"):
                    continue  # no such route here (a Coze code would say what is missing)
                if e.status or e.code:
                    raise RagtrackError(f"Coze at {t.base_url}: bot_id {t.bot_id}: {e}") from None
                self.unanswered_check("Coze", e)
                return {}
            data = info.get("data") if isinstance(info, dict) else None
            name = first(data, "name", "bot_name")
            return {"bot_name": name} if isinstance(name, str) and name else {}
        raise RagtrackError(
            f"Coze at {t.base_url}: neither /v1/bots/{t.bot_id} nor /v1/bot/get_online_info is there (HTTP 404): "
            "is base_url Coze's API address (https://api.coze.cn, https://api.coze.com, or your Coze Studio's)?"
        )

    def call(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        """One chat, start to end: counted as one call, whose latency runs from the answered ``POST
        /v3/chat`` (less its own time, not the waits of its retries) to the message list."""
        t: CozeTable = self.table
        requests = Usage()
        body: dict[str, Any] = {
            "bot_id": t.bot_id,
            "user_id": t.user_id,
            "stream": False,
            "auto_save_history": True,
            # A follow-up: the earlier turns go first in the same chat (Coze reads them as its context).
            "additional_messages": [
                *(_coze_message(t.role, t.content) for t in history),
                _coze_message("user", question),
            ],
        }
        if t.custom_variables:
            body["custom_variables"] = t.custom_variables
        chat = _data(self.endpoint.request("POST", "/v3/chat", json_body=body, usage=requests, step="coze"), dict)
        started = time.monotonic() - requests.latencies[-1]
        ids = {"conversation_id": str(chat.get("conversation_id")), "chat_id": str(chat.get("id"))}
        while chat.get("status") in RUNNING:
            if time.monotonic() - started > self.timeout_s:
                self._cancel(ids)
                raise AgentCallError(f"the chat was still {chat.get('status')} after {self.timeout_s:g} s (timeout_s)")
            if self._abandoned.wait(t.poll_interval_s):
                self._cancel(ids)
                raise AgentCallError("the eval stopped; the chat was cancelled")
            reply = self.endpoint.request("GET", "/v3/chat/retrieve", params=ids, usage=requests, step="coze")
            chat = _data(reply, dict)
        if chat.get("status") == "requires_action":
            self._cancel(ids)  # it would wait for the output forever
        if chat.get("status") != "completed":
            raise AgentCallError(_unfinished(chat))
        listed = self.endpoint.request("GET", "/v3/chat/message/list", params=ids, usage=requests, step="coze")
        usage.calls += 1
        usage.retries += requests.retries
        usage.latencies.append(time.monotonic() - started)
        return read_chat(chat, _data(listed, list))

    def abandon(self) -> None:
        """The eval stopped: chats still running are cancelled instead of waited for."""
        self._abandoned.set()

    def _cancel(self, ids: dict[str, str]) -> None:
        """Stop a chat given up on, so the bot does not keep working on it (best effort)."""
        with contextlib.suppress(EndpointError):
            self.endpoint.request("POST", "/v3/chat/cancel", json_body=ids, usage=Usage(), step="coze")

    def describe(self) -> dict[str, str]:
        t: CozeTable = self.table
        return {**super().describe(), "base_url": t.base_url, "bot_id": t.bot_id, **self.bot}


def _coze_message(role: str, content: str) -> dict[str, str]:
    """A turn as Coze's ``additional_messages`` entry: a user's question or the bot's answer."""
    kind = "question" if role == "user" else "answer"
    return {"role": role, "type": kind, "content": content, "content_type": "text"}


def _data(body: Any, kind: type) -> Any:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, kind):
        raise AgentCallError(f"unexpected reply (no data {kind.__name__}): {str(body)[:120]!r}")
    return data


def _unfinished(chat: dict) -> str:
    """Why a chat ended without an answer, in words a user can act on."""
    status = chat.get("status")
    if status == "failed":
        error = chat.get("last_error") if isinstance(chat.get("last_error"), dict) else {}
        return f"the chat failed: {error.get('code', '?')} {error.get('msg') or 'no reason given'}"
    if status == "requires_action":
        return (
            "the bot stopped for input ragtrack cannot give (requires_action: a plugin that runs on the "
            "client, or a workflow asking the user a question)"
        )
    return f"the chat ended {status or 'without a status'}"


def read_chat(chat: dict, messages: list) -> Reply:
    """A completed chat and its messages → answer, recalled chunks, tokens."""
    messages = [m for m in messages if isinstance(m, dict)]
    answers = [m for m in messages if m.get("type") == "answer" and m.get("role", "assistant") == "assistant"]
    if not answers:
        raise AgentCallError("the chat completed without an answer message")
    answer = "\n\n".join(str(m.get("content") or "").strip() for m in answers).strip()
    used = chat.get("usage") if isinstance(chat.get("usage"), dict) else {}
    tokens = {"tokens_in": int(number(used.get("input_count")) or 0)}
    tokens["tokens_out"] = int(number(used.get("output_count")) or 0)
    recalls = [chunks for m in messages if (chunks := _recall(m.get("content"))) is not None]
    if not recalls:
        return Reply(answer, None, NO_RECALL, **tokens)
    chunks = [c for chunks in recalls for c in chunks]
    return Reply(answer, [_slice_context(c, n) for n, c in enumerate(chunks, start=1)], **tokens)


def _recall(content: Any) -> list[dict] | None:
    """The chunks of a knowledge-recall message (its ``data`` is itself JSON text), or None for any
    other message."""
    try:
        outer = json.loads(content) if isinstance(content, str) and content.startswith("{") else None
        if not isinstance(outer, dict) or outer.get("msg_type") != "knowledge_recall":
            return None
        data = outer.get("data")
        data = json.loads(data) if isinstance(data, str) else data
    except ValueError:
        return None
    chunks = data.get("chunks") if isinstance(data, dict) else None
    return [c for c in chunks or [] if isinstance(c, dict)]


def _slice_context(c: dict, rank: int) -> PlatformContext:
    document = (c.get("meta") or {}).get("document") if isinstance(c.get("meta"), dict) else None
    document = document if isinstance(document, dict) else {}
    return PlatformContext(
        id=f"slice@{rank}",  # slices have no ID of their own
        text=str(c.get("slice") or ""),
        doc_id=str(document.get("id") or ""),
        doc_name=str(document.get("name") or ""),
        score=number(c.get("score")),
    )


KIND = AgentKind("coze", CozeSpec, CozeAgent, declared_files)
