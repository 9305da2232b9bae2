"""Hostile platform servers on 127.0.0.1: a small programmable loopback HTTP server for the pull's fault tests.

Written apart from the documented stand-ins (:mod:`ragtrack.testing.dify_server`,
:mod:`ragtrack.testing.ragflow_server`), which answer as the platforms do and are what the
walkthroughs rely on: these answer as a broken deployment, a proxy in maintenance or a hostile
server would. Each holds a tiny app in the platform's documented shapes — :class:`DifyApp` (``GET
/app/feedbacks``, ``/end-users/{id}``, ``/messages``) and :class:`RagflowApp` (``GET
/api/v1/chats/{chat_id}/sessions``) — and a table of :class:`Misbehaviour` s by path: a junk reply
with HTTP 200, one page repeated forever, a body dripped a byte at a time, silence (the request is
read, nothing is ever sent back), a huge ``Retry-After``. Every wait ends when the server is closed,
so no test can hang on it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Reply:
    """What the server sends: ``body`` as JSON (bytes as they are), with ``status`` and ``headers``;
    ``drip_s``: seconds between the body's bytes (0: all at once); ``silent``: nothing at all."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    drip_s: float = 0.0
    silent: bool = False


#: A misbehaviour: given the query and the reply the app would give, the reply to send instead (None:
#: the app's own). Installed per path prefix with :meth:`HostileServer.misbehave`.
Misbehaviour = Callable[[dict[str, str], Reply], Reply | None]


def junk(body: Any, status: int = 200) -> Misbehaviour:
    """Always ``body`` with ``status`` (HTTP 200 by default: a proxy's maintenance page, a wrong API)."""
    return lambda query, reply: Reply(body, status)


def repeat_first_page() -> Misbehaviour:
    """The first page, whatever page or cursor was asked for, saying there is more: a server ignoring
    the page parameter."""
    first: list[Reply] = []

    def answer(query: dict[str, str], reply: Reply) -> Reply:
        if not first:
            first.append(reply)
        body = first[0].body
        if isinstance(body, dict) and "has_more" in body:
            body = {**body, "has_more": True}
        return Reply(body)

    return answer


def endless(make_page: Callable[[int], Any]) -> Misbehaviour:
    """A new full page at every request (``make_page(n)`` for the n-th): a listing that never ends."""
    count = [0]

    def answer(query: dict[str, str], reply: Reply) -> Reply:
        count[0] += 1
        return Reply(make_page(count[0]))

    return answer


def drip(seconds_per_byte: float = 1.0) -> Misbehaviour:
    """The right reply, sent a byte every ``seconds_per_byte``: every read gets data, the reply never ends."""
    return lambda query, reply: Reply(reply.body, reply.status, reply.headers, drip_s=seconds_per_byte)


def silence() -> Misbehaviour:
    """The request is read and nothing is ever sent back (until the server closes)."""
    return lambda query, reply: Reply(silent=True)


def retry_after(seconds: int, times: int = 1) -> Misbehaviour:
    """``times`` replies of 429 with ``Retry-After: seconds``, then the app's own replies."""
    left = [times]

    def answer(query: dict[str, str], reply: Reply) -> Reply | None:
        if left[0] <= 0:
            return None
        left[0] -= 1
        return Reply({"code": "too_many_requests", "message": "slow down"}, 429, {"Retry-After": str(seconds)})

    return answer


class HostileServer:
    """``app(path, query) -> Reply`` served on 127.0.0.1, with misbehaviours by path prefix; a context manager."""

    def __init__(self, app: Callable[[str, dict[str, str]], Reply]):
        self.app = app
        self.misbehaviours: dict[str, Misbehaviour] = {}
        self.requests: list[str] = []  # path?query of each request, in order
        self.closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                path = unquote(parts.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                server.requests.append(self.path)
                reply = server.app(path, query)
                for prefix, misbehave in server.misbehaviours.items():
                    if path.startswith(prefix) and (other := misbehave(query, reply)) is not None:
                        reply = other
                        break
                server.send(self, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def misbehave(self, prefix: str, how: Misbehaviour | None) -> None:
        """Requests whose path starts with ``prefix`` get ``how``'s replies (None: the app's own again)."""
        if how is None:
            self.misbehaviours.pop(prefix, None)
        else:
            self.misbehaviours[prefix] = how

    def send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.silent:
            self.closed.wait()
            return
        data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        try:
            if not reply.drip_s:
                handler.wfile.write(data)
                return
            for i in range(len(data)):
                if self.closed.wait(reply.drip_s):
                    return
                handler.wfile.write(data[i : i + 1])
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: what a pull should do
            pass

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class DifyMessage:
    id: str
    query: str
    answer: str
    created_at: int  # Unix seconds, as Dify gives them


class DifyApp:
    """One Dify chat app as its service API shows it: conversations of one service-API end user each,
    some messages rated by the user. Feedbacks newest first, ``page``/``limit``; messages oldest first
    per page, older pages by ``first_id``, with ``has_more``."""

    def __init__(self) -> None:
        self.conversations: dict[str, list[DifyMessage]] = {}
        self.users: dict[str, str] = {}  # conversation → end-user ID
        self.ratings: dict[str, str] = {}  # message ID → like / dislike

    def conversation(self, conversation_id: str, size: int, start: int = 1_733_000_000) -> list[DifyMessage]:
        """Add (or extend to ``size``) a conversation of questions about the sampler."""
        messages = self.conversations.setdefault(conversation_id, [])
        self.users.setdefault(conversation_id, f"eu-{conversation_id}")
        for n in range(len(messages), size):
            messages.append(
                DifyMessage(f"{conversation_id}-m{n:05d}", f"question {n}: how many steps?", "20.", start + 60 * n)
            )
        return messages

    def rate(self, message_id: str, rating: str | None) -> None:
        if rating is None:
            self.ratings.pop(message_id, None)
        else:
            self.ratings[message_id] = rating

    def __call__(self, path: str, query: dict[str, str]) -> Reply:
        if path == "/v1/app/feedbacks":
            return self.feedbacks(int(query.get("page", 1)), int(query.get("limit", 20)))
        if path.startswith("/v1/end-users/"):
            end_user = path.rsplit("/", 1)[1]
            if end_user not in self.users.values():
                return Reply({"code": "not_found", "message": "End user not found"}, 404)
            return Reply({"id": end_user, "type": "service_api", "session_id": f"session-{end_user}"})
        if path == "/v1/messages":
            return self.messages(query)
        return Reply({"code": "not_found", "message": "Not Found"}, 404)

    def feedbacks(self, page: int, limit: int) -> Reply:
        rated = [(c, m) for c, ms in self.conversations.items() for m in ms if m.id in self.ratings]
        rated.sort(key=lambda cm: cm[1].created_at, reverse=True)
        data = [
            {
                "id": f"fb-{m.id}",
                "app_id": "app",
                "conversation_id": c,
                "message_id": m.id,
                "rating": self.ratings[m.id],
                "content": None,
                "from_source": "user",
                "from_end_user_id": self.users[c],
                "from_account_id": None,
                "created_at": "2024-12-01T10:00:00Z",
                "updated_at": "2024-12-01T10:00:00Z",
            }
            for c, m in rated[(page - 1) * limit : page * limit]
        ]
        return Reply({"data": data})

    def messages(self, query: dict[str, str]) -> Reply:
        conversation = query.get("conversation_id", "")
        messages = self.conversations.get(conversation)
        if messages is None or query.get("user") != f"session-{self.users[conversation]}":
            return Reply({"code": "not_found", "message": "Conversation Not Exists."}, 404)
        limit = int(query.get("limit", 20))
        end = len(messages)
        if first := query.get("first_id"):
            end = next(i for i, m in enumerate(messages) if m.id == first)
        page = messages[max(0, end - limit) : end]
        data = [
            {
                "id": m.id,
                "conversation_id": conversation,
                "inputs": {},
                "query": m.query,
                "answer": m.answer,
                "message_files": [],
                "feedback": {"rating": self.ratings[m.id]} if m.id in self.ratings else None,
                "retriever_resources": [],
                "created_at": m.created_at,
            }
            for m in page
        ]
        return Reply({"limit": limit, "has_more": end - limit > 0, "data": data})


class RagflowApp:
    """One RAGFlow chat assistant's sessions (``page``/``page_size``, most recently updated first)."""

    def __init__(self, chat_id: str = "chat-1") -> None:
        self.chat_id = chat_id
        self.sessions: list[dict] = []

    def session(self, session_id: str, turns: int, update_time: int) -> dict:
        messages: list[dict] = [{"role": "assistant", "content": "Hi! How can I help?"}]
        for n in range(turns):
            messages.append({"role": "user", "content": f"question {n}: how many steps?", "id": f"{session_id}-{n}"})
            messages.append({"role": "assistant", "content": "20.", "id": f"{session_id}-{n}"})
        session = {
            "id": session_id,
            "chat_id": self.chat_id,
            "name": session_id,
            "messages": messages,
            "create_time": update_time,
            "update_time": update_time,
            "user_id": f"user-{session_id}",
        }
        self.sessions.append(session)
        return session

    def __call__(self, path: str, query: dict[str, str]) -> Reply:
        if path != f"/api/v1/chats/{self.chat_id}/sessions":
            return Reply({"code": 102, "message": "You don't own the assistant."})
        page, size = int(query.get("page", 1)), int(query.get("page_size", 30))
        listed = sorted(self.sessions, key=lambda s: s["update_time"], reverse=True)
        return Reply({"code": 0, "data": listed[(page - 1) * size : page * size]})
