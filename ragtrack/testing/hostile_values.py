"""Loopback Dify and RAGFlow servers that say exactly what a test hands them: odd values in every field.

Written apart from the stand-ins of :mod:`ragtrack.testing.dify_server` and
:mod:`ragtrack.testing.ragflow_server`, which model the platforms' behaviour (users, paging, rating
history) and always produce well-formed values: these model nothing. A test builds the records with
:func:`feedback`, :func:`end_user`, :func:`message` and :func:`session` — the shapes of Dify's and
RAGFlow's API references, well-formed — puts one hostile value in one field, and the server hands
them out as they are (a ``NaN``, a lone surrogate as a ``\\ud800`` escape, a 5,000-digit number).
Only the routes a pull calls exist; anything else is a 404 recorded in ``exchanges``, so a test can
prove no request left the API's path.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import unquote

from ragtrack.testing.server import LoopbackServer, Request, Response, bearer


class Digits(str):
    """A JSON number of these digits, however many: ``json.dumps`` cannot write an integer of more than
    4,300 digits (a 5,000-digit ``message_id``), so the reply is written by :func:`json_reply`."""


def json_reply(body: Any) -> bytes:
    """``body`` as JSON, every :class:`Digits` as a bare number; a lone surrogate as its ``\\u`` escape."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Digits):
            found.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(body)
    text = json.dumps(body)  # ASCII escapes: a lone surrogate is written as \ud800
    for digits in found:
        text = text.replace(f'"{digits}"', digits)
    return text.encode("ascii")


#: A moment the well-formed records are answered at (2024-06-12T10:00:00Z), in Unix seconds.
AT = 1718186400


def feedback(message_id: Any, conversation_id: Any = "c-1", end_user_id: Any = "eu-1", **fields) -> dict:
    """One ``/app/feedbacks`` item of an end user (Dify's shape)."""
    return {
        "id": f"fb-{message_id}",
        "app_id": "app-1",
        "conversation_id": conversation_id,
        "message_id": message_id,
        "rating": "like",
        "content": None,
        "from_source": "user",
        "from_end_user_id": end_user_id,
        "from_account_id": None,
        "created_at": "2024-06-12T10:05:00",
        "updated_at": "2024-06-12T10:05:00",
        **fields,
    }


def end_user(end_user_id: Any = "eu-1", session_id: Any = "user-1") -> dict:
    """``GET /end-users/{id}`` (Dify's shape) of a service API user."""
    return {"id": end_user_id, "type": "service_api", "session_id": session_id, "is_anonymous": False}


def message(message_id: Any, conversation_id: Any = "c-1", **fields) -> dict:
    """One ``/messages`` item (Dify's shape), with no retrieval."""
    return {
        "id": message_id,
        "conversation_id": conversation_id,
        "query": f"question {message_id}?",
        "answer": f"answer {message_id}.",
        "retriever_resources": [],
        "feedback": None,
        "created_at": AT,
        **fields,
    }


class HostileDify(LoopbackServer):
    """Dify's service API under ``/v1``: feedbacks (one page), end users, one conversation's messages."""

    PREFIX = "/v1"
    ROUTES = [
        ("GET", r"/v1/app/feedbacks", "feedbacks_route"),
        ("GET", r"/v1/end-users/(?P<end_user_id>[^/]+)", "end_user_route"),
        ("GET", r"/v1/messages", "messages_route"),
    ]

    def __init__(self, key: str, feedbacks: list[dict], end_users: list[dict], messages: list[dict]):
        super().__init__()
        self.key, self.feedbacks, self.end_users, self.messages = key, feedbacks, end_users, messages

    def error(self, status: int, code: str, message: str) -> Response:
        return Response(status, {"code": code, "message": message, "status": status})

    def _refused(self, request: Request) -> Response | None:
        return None if bearer(request) == self.key else self.error(401, "unauthorized", "Invalid Authorization")

    def feedbacks_route(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        page = int(request.query.get("page", 1))
        return Response(200, json_reply({"data": self.feedbacks if page == 1 else []}))

    def end_user_route(self, request: Request, end_user_id: str) -> Response:
        if refused := self._refused(request):
            return refused
        found = [u for u in self.end_users if str(u.get("id")) == unquote(end_user_id)]
        if not found:
            return self.error(404, "end_user_not_found", "End user not found")
        return Response(200, json_reply(found[0]))

    def messages_route(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        conversation = request.query.get("conversation_id")
        listed = [m for m in self.messages if str(m.get("conversation_id")) == conversation]
        if not listed:
            return self.error(404, "not_found", "Conversation Not Exists.")
        return Response(200, json_reply({"limit": 100, "has_more": False, "data": listed}))


def turn(answer_id: Any, **fields) -> list[dict]:
    """A user's question and the assistant's answer to it, in a RAGFlow session's ``messages``."""
    return [
        {"role": "user", "content": f"question {answer_id}?", "id": answer_id, "created_at": AT},
        {"role": "assistant", "content": f"answer {answer_id}.", "id": answer_id, "created_at": AT, **fields},
    ]


def session(session_id: Any, *turns: list[dict], **fields) -> dict:
    """One session of ``/api/v1/chats/{chat_id}/sessions`` (RAGFlow's shape), ``update_time`` in ms."""
    messages = [{"role": "assistant", "content": "Hi! How can I help?"}, *(m for t in turns for m in t)]
    return {
        "id": session_id,
        "chat_id": "chat-1",
        "name": "session",
        "messages": messages,
        "reference": [{"chunks": []} for _ in turns],
        "user_id": "user-1",
        "create_time": AT * 1000,
        "update_time": AT * 1000,
        **fields,
    }


class HostileRagflow(LoopbackServer):
    """RAGFlow's sessions listing of one chat assistant (one page), in RAGFlow's ``{code, data}`` envelope."""

    ROUTES = [("GET", r"/api/v1/chats/(?P<chat_id>[^/]+)/sessions", "sessions_route")]

    def __init__(self, key: str, chat_id: str, sessions: list[dict]):
        super().__init__()
        self.key, self.chat_id, self.sessions = key, chat_id, sessions

    def error(self, status: int, code: str, message: str) -> Response:
        return Response(status, {"code": 102 if status == 404 else 109, "message": message})

    def sessions_route(self, request: Request, chat_id: str) -> Response:
        if bearer(request) != self.key:
            return self.error(401, "unauthorized", "Authentication error: API key is invalid!")
        if chat_id != self.chat_id:
            return self.error(404, "not_found", f"You don't own the assistant {chat_id}.")
        page = int(request.query.get("page", 1))
        return Response(200, json_reply({"code": 0, "data": self.sessions if page == 1 else []}))


#: The campaign's times, as a platform might send them: none is a time an app answered at.
BAD_TIMES = {
    "day-month-ambiguous": "06/12/2024 10:00",
    "nan": math.nan,
    "1e20": 1e20,
    "zero": 0,
    "negative": -5,
    "yesterday": "yesterday",
    "year-1-with-offset": "0001-01-01T00:00:00+05:00",
    "year-9999-with-offset": "9999-12-31T23:59:59-05:00",
}
