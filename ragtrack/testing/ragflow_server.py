"""A loopback server that speaks RAGFlow's HTTP API, over a folder of documents.

    python -m ragtrack.testing.ragflow_server --port 9380 --kb golden/kb --api-key ragflow-demo

One chat assistant over one dataset (the folder, re-chunked RAGFlow's way:
see :mod:`ragtrack.testing.knowledge`). Shapes follow RAGFlow's API: the
OpenAI-compatible ``POST /api/v1/chats_openai/{chat_id}/chat/completions``
(v0.20+; ``/api/v1/openai/...`` too, as v0.26+ serves it, unless ``--old``) whose
``message.reference`` is a flat list of chunks when references are asked for
(in a literal ``extra_body`` object, as v0.23+ reads them), ``POST
/api/v1/retrieval``, and the listings ``GET /api/v1/chats``, ``/api/v1/datasets``,
``/datasets/{id}/documents`` and ``/documents/{id}/chunks``. Errors come the
RAGFlow way: HTTP 200 with a non-zero ``code`` (a missing key: ``code`` 0 and
``data: false``).

Production logs: ``GET /api/v1/chats/{chat_id}/sessions`` (``page``, ``page_size`` — default 30,
``orderby`` ``create_time``/``update_time``, ``desc``, ``id``, ``user_id``) lists an assistant's
sessions with their messages — the user's question and the assistant's answer share an ``id``; a
rated answer has ``thumbup`` (true/false) and, when disliked, ``feedback`` — and one ``reference``
entry (``{"chunks": [...], "doc_aggs": [...]}``) per answer, in order, as RAGFlow keeps them since
its RESTful sessions API; ``--old`` lists them the SDK way of v0.2x instead: each non-user message
gets the next reference, the opening greeting included (so the greeting shows the first answer's
chunks, each answer the next one's, the last none: RAGFlow's listing did that).
``PUT .../sessions/{id}/messages/{msg_id}/feedback`` rates an answer. ``traffic`` seeds a
:class:`~ragtrack.testing.traffic.TrafficPlan`: one chat assistant per app version (``chat_of(version)``),
its conversations as sessions, seen as of ``log.as_of``.

Faults for tests (``inject``): ``429``, ``500``, ``slow``, ``drop``,
``no_reference`` (a reply without ``reference``) and ``llm_error`` (the
assistant's model failed: HTTP 200 with code 100, as RAGFlow reports it).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from ragtrack.production.messages import epoch_ms
from ragtrack.testing.conversations import Conversation, ConversationLog, add_traffic_options, traffic_args
from ragtrack.testing.knowledge import Knowledge, Segment, extractive_answer, ragflow_chunks, stable_id
from ragtrack.testing.server import FAULTS, LoopbackServer, Request, Response, add_fault_option, bearer, page_args

HEX = r"[0-9a-f]{32}"
PROLOGUE = "Hi! I'm your assistant, what can I do for you?"  # an assistant's opening message in each session


def hex_id(*parts: str) -> str:
    return stable_id(*parts).hex  # RAGFlow IDs are 32 hex digits


class RagflowServer(LoopbackServer):
    ROUTES = [
        ("POST", r"/api/v1/(?P<route>chats_openai|openai)/(?P<chat>[^/]+)/chat/completions", "chat_completions"),
        ("POST", r"/api/v1/retrieval", "retrieval"),
        ("GET", r"/api/v1/datasets", "list_datasets"),
        ("GET", r"/api/v1/chats", "list_chats"),
        ("GET", rf"/api/v1/datasets/(?P<dataset>{HEX})/documents", "list_documents"),
        ("GET", rf"/api/v1/datasets/(?P<dataset>{HEX})/documents/(?P<document>{HEX})/chunks", "list_chunks"),
        ("GET", r"/api/v1/chats/(?P<chat>[^/]+)/sessions", "list_sessions"),
        ("PUT", r"/api/v1/chats/(?P<chat>[^/]+)/sessions/(?P<session>[^/]+)/messages/(?P<msg>[^/]+)/feedback", "rate"),
    ]

    def __init__(
        self,
        kb: str | Path,
        *,
        api_key: str = "ragflow-loopback",
        dataset_name: str = "",
        top_n: int = 4,
        max_chars: int = 300,
        old: bool = False,
        chat_routes: tuple[str, ...] = ("chats_openai", "openai"),
        traffic=None,
        port: int = 0,
        cites: Callable[[str, list[str]], str] | None = None,
    ):
        super().__init__(port)
        self.api_key, self.top_n, self.old = api_key, top_n, old
        #: How the assistant cites: (answer, the reference chunks' texts in order) → the answer with its
        #: [ID:n] markers. Default: one [ID:0] after an answer that retrieved anything.
        self.cites = cites
        self.chat_routes = ("chats_openai",) if old else chat_routes
        self.knowledge = Knowledge(kb, ragflow_chunks, max_chars, ids=hex_id)
        self.dataset_name = dataset_name or Path(kb).resolve().name
        self.dataset_id = hex_id("dataset", self.dataset_name)
        self.chat_id = hex_id("chat", self.dataset_name)
        self.log = ConversationLog.from_plan(traffic) if traffic is not None else ConversationLog()
        #: chat assistant ID → its name (the app version whose sessions it holds)
        self.chats = {self.chat_id: f"{self.dataset_name} assistant"}
        self.chats.update({hex_id("chat", v): v for v in (traffic.app_versions if traffic is not None else ())})

    def chat_of(self, app: str) -> str:
        """The chat assistant ID that holds one app version's sessions."""
        return next(chat for chat, name in self.chats.items() if name == app)

    def delete_session(self, session_id: str) -> None:
        next(c for c in self.log.conversations.values() if uuid.UUID(c.id).hex == session_id).deleted = True

    # ---------------------------------------------------------------- shapes
    def error(self, status: int, code: str, message: str) -> Response:
        if status == 429 or status >= 500:  # a proxy in front of RAGFlow: real HTTP errors
            return Response(status, {"code": status, "message": message, "data": None})
        return Response(200, {"code": int(code) if str(code).isdigit() else 102, "message": message, "data": None})

    def not_found(self, request: Request) -> Response:
        if self.old:  # Flask era (≤ v0.23): the catch-all handler answers 200 with code 100
            return Response(200, {"code": 100, "message": "<NotFound '404: Not Found'>", "data": None})
        return Response(404, {"code": 404, "message": f"Not Found: {request.path}", "data": None, "error": "Not Found"})

    def _auth(self, request: Request) -> Response | None:
        token = bearer(request)
        if token is None:  # up to v0.24: code 0, and data false
            return Response(200, {"code": 0, "message": "`Authorization` can't be empty", "data": False})
        if token != self.api_key:
            return Response(200, {"code": 109, "message": "Authentication error: API key is invalid!", "data": False})
        return None

    def _chunk(self, s: Segment, score: float | None = None) -> dict[str, Any]:
        out = {
            "id": s.id,
            "content": s.text,
            "document_id": s.document.id,
            "dataset_id": self.dataset_id,
            "image_id": "",
            "positions": [[s.position, 0, 0, 0, 0]],
        }
        if score is not None:
            out.update(similarity=score, vector_similarity=score, term_similarity=score)
        return out

    # ---------------------------------------------------------------- chat
    def chat_completions(self, request: Request, route: str, chat: str) -> Response:
        if route not in self.chat_routes:
            return self.not_found(request)
        if denied := self._auth(request):
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        missing = [k for k in ("model", "messages") if k not in body]
        if missing:
            return self.error(200, "101", "required argument are missing: " + "".join(f"{k}; " for k in missing))
        if chat not in self.chats:
            return self.error(200, "102", f"You don't own the chat {chat}")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if not messages:
            return self.error(200, "102", "You have to provide messages.")
        if messages[-1].get("role") != "user":
            return self.error(200, "102", "The last content of this conversation is not from user.")
        extra = body.get("extra_body", {})
        if not isinstance(extra, dict):
            return self.error(200, "102", "extra_body must be an object.")
        fault = self.fault()
        if isinstance(fault, Response):
            return fault
        if fault is not None and fault.kind == "llm_error":
            return self.error(200, "100", "LLM error: the model provider refused the request (401 invalid token)")
        question = str(messages[-1].get("content") or "")
        hits = self.knowledge.search(question, self.top_n)
        answer = extractive_answer(question, [s for s, _ in hits])
        if self.cites is not None:
            answer = self.cites(answer, [s.text for s, _ in hits])
        elif hits:
            answer += " [ID:0]"  # RAGFlow marks the chunks it cites
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if extra.get("reference") and not (fault is not None and fault.kind == "no_reference"):
            message["reference"] = [
                {
                    **self._chunk(s, score),
                    "document_name": s.document.name,
                    "url": None,
                    "doc_type": "",
                    "row_id": None,
                    "document_metadata": None,
                }
                for s, score in hits
            ]
        prompt = question + "".join(s.text for s, _ in hits)
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(answer) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return Response(
            200,
            {
                "id": f"chatcmpl-{chat}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None, "message": message}],
            },
        )

    # ---------------------------------------------------------------- retrieval and listings
    def retrieval(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("question"):
            return self.error(200, "102", "`question` is required.")
        if not body.get("dataset_ids"):
            return self.error(200, "102", "`dataset_ids` is required.")
        if any(d != self.dataset_id for d in body["dataset_ids"]):
            return self.error(200, "102", f"You don't own the dataset {body['dataset_ids'][0]}.")
        fault = self.fault()
        if isinstance(fault, Response):
            return fault
        page, size = int(body.get("page") or 1), int(body.get("page_size") or 30)
        threshold = float(body.get("similarity_threshold", 0.2))
        hits = [(s, score) for s, score in self.knowledge.search(body["question"], 1024) if score >= threshold]
        chunks = [
            {
                **self._chunk(s, score),
                "content_ltks": s.text.lower(),
                "document_keyword": s.document.name,
                "important_keywords": [],
                "doc_type_kwd": "",
            }
            for s, score in hits[(page - 1) * size : page * size]
        ]
        aggs: dict[str, dict] = {}
        for s, _ in hits:
            aggs.setdefault(s.document.id, {"doc_name": s.document.name, "doc_id": s.document.id, "count": 0})
            aggs[s.document.id]["count"] += 1
        doc_aggs = sorted(aggs.values(), key=lambda a: -a["count"])
        return Response(200, {"code": 0, "data": {"chunks": chunks, "doc_aggs": doc_aggs, "total": len(hits)}})

    def list_datasets(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        unknown = set(request.query) - {"page", "page_size", "orderby", "desc", "name", "id"}
        if unknown:
            return self.error(200, "101", f"Extra inputs are not permitted: {sorted(unknown)[0]}")
        if request.query.get("id") not in (None, self.dataset_id):  # the check RAGFlow makes since v0.25
            return self.error(200, "108", f"User lacks permission for dataset '{request.query['id']}'")
        k = self.knowledge
        dataset = {
            "id": self.dataset_id,
            "name": self.dataset_name,
            "avatar": "",
            "description": "loopback dataset",
            "language": "English",
            "embedding_model": "loopback-bm25",
            "permission": "me",
            "document_count": len(k.documents),
            "chunk_count": len(k.segments),
            "token_num": sum(len(s.text) // 4 for s in k.segments),
            "chunk_method": "naive",
            "status": "1",
            "create_time": 1718000000000,
        }
        return Response(200, {"code": 0, "data": [dataset], "total_datasets": 1})

    def list_chats(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        if request.query.get("id") not in (None, *self.chats):
            return self.error(200, "102", "The chat doesn't exist")
        chats = [
            {
                "id": chat,
                "name": name,
                "datasets": [{"id": self.dataset_id, "name": self.dataset_name}],
                "llm": {"model_name": "loopback-extractive"},
                "prompt": {"top_n": self.top_n, "show_quote": True},
                "status": "1",
            }
            for chat, name in self.chats.items()
            if request.query.get("id") in (None, chat)
        ]
        return Response(200, {"code": 0, "data": chats})

    # ---------------------------------------------------------------- sessions (production logs)
    def _sessions(self, chat: str) -> list[Conversation]:
        return self.log.of_app(self.chats[chat])

    def list_sessions(self, request: Request, chat: str) -> Response:
        if denied := self._auth(request):
            return denied
        if chat not in self.chats:
            return self.error(200, "102", f"You don't own the assistant {chat}.")
        fault = self.fault()
        if isinstance(fault, Response):
            return fault
        q = request.query
        orderby = q.get("orderby", "create_time")
        if orderby not in ("create_time", "update_time", "name"):
            return self.error(200, "101", f"invalid orderby field: {orderby}")
        page, size = page_args(request, "page_size", 30)
        sessions = [self._session(chat, c) for c in self._sessions(chat)]
        sessions = [x for x in sessions if all(q.get(k) in (None, x[k]) for k in ("id", "name", "user_id") if q.get(k))]
        sessions.sort(key=lambda x: (x[orderby], x["id"]), reverse=q.get("desc", "true").lower() != "false")
        shown = [] if q.get("page_size") == "0" else sessions[(page - 1) * size : page * size]
        if self.old:  # the SDK listing of v0.2x: references attached to the messages
            shown = [_attached(x) for x in shown]
        return Response(200, {"code": 0, "data": shown})

    def _session(self, chat: str, c: Conversation) -> dict[str, Any]:
        """A session as RAGFlow stores it (its messages, one reference per answer)."""
        messages: list[dict[str, Any]] = [{"role": "assistant", "content": PROLOGUE}]
        references = []
        changed = epoch_ms(c.created_at)
        for t in self.log.visible(c):
            mid = t.id  # RAGFlow names a question and its answer with one str(uuid4())
            at = epoch_ms(t.created_at) / 1000
            cited = t.answer + (" [ID:0]" if t.retrieved else "")
            answer: dict[str, Any] = {"role": "assistant", "content": cited, "created_at": at, "id": mid}
            rating, comment, _, rated = t.rating(self.log.as_of)
            if rating:
                answer["thumbup"] = rating == "like"
                if rating == "dislike" and comment:
                    answer["feedback"] = comment
                changed = max(changed, epoch_ms(rated))
            messages += [{"role": "user", "content": t.question, "id": mid, "created_at": at}, answer]
            chunks = [
                {
                    "id": r.id,
                    "content": r.text,
                    "document_id": r.document_id,
                    "document_name": r.document_name,
                    "dataset_id": self.dataset_id,
                    "image_id": "",
                    "positions": [],
                    "url": None,
                    "similarity": r.score,
                    "vector_similarity": r.score,
                    "term_similarity": r.score,
                    "row_id": None,
                    "doc_type": "",
                    "document_metadata": None,
                }
                for r in t.retrieved
            ]
            aggs = [
                {"doc_id": d, "doc_name": n, "count": 1}
                for d, n in sorted({(r.document_id, r.document_name) for r in t.retrieved})
            ]
            references.append({"chunks": chunks, "doc_aggs": aggs})
            changed = max(changed, epoch_ms(t.created_at))
        created = epoch_ms(c.created_at)
        return {
            "id": uuid.UUID(c.id).hex,
            "chat_id": chat,
            "name": (self.log.visible(c)[0].question[:255] if self.log.visible(c) else "New session"),
            "messages": messages,
            "reference": references,
            "user_id": c.user if c.channel == "api" else "",
            "create_time": created,
            "create_date": _http_date(created),
            "update_time": changed,
            "update_date": _http_date(changed),
        }

    def rate(self, request: Request, chat: str, session: str, msg: str) -> Response:
        if denied := self._auth(request):
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        sessions = self._sessions(chat) if chat in self.chats else []
        found = next((c for c in sessions if uuid.UUID(c.id).hex == session), None)
        if found is None:
            return self.error(200, "102", "Session not found!")
        if not isinstance(body.get("thumbup"), bool):
            return self.error(200, "102", "thumbup must be a boolean")
        turn = next((t for t in self.log.visible(found) if t.id == msg), None)
        if turn is not None:
            up = body["thumbup"]
            self.log.rate(turn, "like" if up else "dislike", None if up else body.get("feedback") or None)
        return Response(200, {"code": 0, "data": self._session(chat, found)})

    def _document(self, d) -> dict[str, Any]:
        return {
            "id": d.id,
            "name": d.name,
            "dataset_id": self.dataset_id,
            "chunk_method": "naive",
            "chunk_count": len(d.segments),
            "token_count": sum(len(s.text) // 4 for s in d.segments),
            "progress": 1.0,
            "run": "DONE",
            "status": "1",
            "type": "doc",
            "suffix": d.name.rsplit(".", 1)[-1],
        }

    def list_documents(self, request: Request, dataset: str) -> Response:
        if denied := self._auth(request):
            return denied
        if dataset != self.dataset_id:
            return self.error(200, "102", f"You don't own the dataset {dataset}. ")
        page, size = page_args(request, "page_size", 30)
        docs = [self._document(d) for d in self.knowledge.documents]
        data = {"total": len(docs), "docs": docs[(page - 1) * size : page * size]}
        return Response(200, {"code": 0, "message": "success", "data": data})

    def list_chunks(self, request: Request, dataset: str, document: str) -> Response:
        if denied := self._auth(request):
            return denied
        doc = next((d for d in self.knowledge.documents if d.id == document), None)
        if dataset != self.dataset_id or doc is None:
            return self.error(200, "102", f"You don't own the document {document}.")
        page, size = page_args(request, "page_size", 30)
        chunks = [
            {**self._chunk(s), "docnm_kwd": doc.name, "important_keywords": [], "questions": [], "available": True}
            for s in doc.segments[(page - 1) * size : page * size]
        ]
        data = {"total": len(doc.segments), "chunks": chunks, "doc": self._document(doc)}
        return Response(200, {"code": 0, "data": data})


def _http_date(ms: int) -> str:
    """RAGFlow's ``create_date``: ``Fri, 11 Oct 2024 08:46:43 GMT``."""
    return format_datetime(datetime.fromtimestamp(ms / 1000, UTC), usegmt=True)


def _attached(session: dict[str, Any]) -> dict[str, Any]:
    """A session as the SDK listing of v0.2x returned it: the references handed out in order to the
    non-user messages (the greeting takes the first), reduced to the SDK's chunk fields."""
    out = {k: v for k, v in session.items() if k != "reference"}
    out["messages"] = [dict(m) for m in session["messages"]]
    refs = list(session["reference"])
    keys = ("id", "content", "document_id", "document_name", "dataset_id", "image_id", "positions")
    for m in out["messages"]:
        if not refs:
            break
        if m["role"] != "user":
            m["reference"] = [{k: c.get(k) for k in keys} for c in refs.pop(0)["chunks"]]
    return out


def from_args(argv: list[str] | None = None) -> RagflowServer:
    """The server the command line describes (the README's walkthrough starts it so)."""
    parser = argparse.ArgumentParser(description="A loopback server speaking RAGFlow's HTTP API over a folder.")
    parser.add_argument("--port", type=int, default=9380)
    parser.add_argument("--kb", help="folder of .md/.txt documents: the dataset")
    parser.add_argument("--api-key", default="ragflow-loopback", help="the API key (Bearer)")
    parser.add_argument("--dataset-name", default="", help="the dataset's name (default: the folder's)")
    parser.add_argument("--top-n", type=int, default=4, help="chunks the assistant retrieves per question")
    parser.add_argument("--max-chars", type=int, default=300, help="the most characters in one chunk")
    parser.add_argument("--old", action="store_true", help="behave like v0.20-v0.23 (only /chats_openai/)")
    add_traffic_options(parser)
    add_fault_option(parser, (*FAULTS, "llm_error", "no_reference"))
    a = parser.parse_args(argv)
    plan, kb = traffic_args(a, parser)
    server = RagflowServer(
        kb,
        api_key=a.api_key,
        dataset_name=a.dataset_name,
        top_n=a.top_n,
        max_chars=a.max_chars,
        old=a.old,
        traffic=plan,
        port=a.port,
    )
    server.log.as_of = a.as_of
    server.inject(*a.faults)
    return server


def main(argv: list[str] | None = None) -> None:
    server = from_args(argv)
    chats = "".join(
        f"; {name} assistant {chat}: {len(server._sessions(chat))} sessions"
        for chat, name in server.chats.items()
        if chat != server.chat_id
    )
    server.serve_forever(
        f"RAGFlow-shaped server on {server.base_url}: chat assistant {server.chat_id}, dataset "
        f"{server.dataset_name!r} ({server.dataset_id}), {len(server.knowledge.segments)} chunks{chats}"
    )


if __name__ == "__main__":
    main()
