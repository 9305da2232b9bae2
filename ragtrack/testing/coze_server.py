"""A loopback server that speaks Coze's chat API v3 (non-streaming), over a folder of documents.

    python -m ragtrack.testing.coze_server --port 8888 --kb golden/kb --token pat_demo

One bot whose knowledge base is the folder, chunked as Dify's automatic mode
does (see :mod:`ragtrack.testing.knowledge`). Shapes follow Coze's API
reference: ``POST /v3/chat`` answers at once with the chat ``in_progress``;
``GET /v3/chat/retrieve`` reports it ``completed`` once it has been asked
``steps`` times; ``GET /v3/chat/message/list`` then lists the knowledge recall
(a ``verbose`` message whose content is ``{"msg_type": "knowledge_recall",
"data": "<JSON text: {chunks: [...]}>"}``, as coze.cn sends it; type
``knowledge`` with ``--studio``, as Coze Studio lists it), the ``answer``, the
``generate_answer_finish`` verbose message and a ``follow_up`` suggestion.
``GET /v1/bots/{bot_id}`` (and the older ``GET /v1/bot/get_online_info``)
describes the bot; ``POST /v3/chat/cancel`` cancels
a chat. Errors come as Coze's ``{code, msg, detail: {logid}}``; a wrong token
is HTTP 401 with code 4100.

Faults for tests (``inject``, or ``--fault``), met by the next ``POST /v3/chat``:
``429``, ``500``, ``slow``, ``drop``, ``failed`` (the chat fails: ``last_error``), ``no_recall`` (no
knowledge recall among the messages), ``requires_action`` (the bot waits for
a client-side plugin's output), ``rate_limited`` (HTTP 200, code 4013) and
``running`` (the chat never ends).
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrack.testing.knowledge import Knowledge, Segment, dify_chunks, extractive_answer, stable_id
from ragtrack.testing.server import FAULTS, LoopbackServer, Request, Response, add_fault_option, bearer

KINDS = (*FAULTS, "failed", "no_recall", "requires_action", "rate_limited", "running")


def numeric_id(*parts: str) -> str:
    """Coze IDs are 19-digit numbers."""
    return str(7_000_000_000_000_000_000 + stable_id(*parts).int % 10**18)


@dataclass
class Chat:
    id: str
    conversation_id: str
    question: str
    steps_left: int
    fault: str = ""  # how this chat goes wrong, if it does
    status: str = "in_progress"
    hits: list[tuple[Segment, float]] = field(default_factory=list)
    created_at: int = field(default_factory=lambda: int(time.time()))


class CozeServer(LoopbackServer):
    ROUTES = [
        ("POST", r"/v3/chat", "create_chat"),
        ("GET", r"/v3/chat/retrieve", "retrieve_chat"),
        ("GET", r"/v3/chat/message/list", "list_messages"),
        ("POST", r"/v3/chat/cancel", "cancel_chat"),
        ("GET", r"/v1/bots/(?P<bot>[^/]+)", "bot_info"),
        ("GET", r"/v1/bot/get_online_info", "bot_online_info"),
    ]

    def __init__(
        self,
        kb: str | Path,
        *,
        token: str = "pat_loopback",
        bot_name: str = "",
        top_n: int = 4,
        max_chars: int = 200,
        steps: int = 1,
        studio: bool = False,
        port: int = 0,
    ):
        super().__init__(port)
        self.token, self.top_n, self.steps, self.studio = token, top_n, steps, studio
        self.knowledge = Knowledge(kb, dify_chunks, max_chars, ids=numeric_id)
        self.bot_name = bot_name or f"{Path(kb).resolve().name} bot"
        self.bot_id = numeric_id("bot", self.bot_name)
        self.dataset_id = numeric_id("dataset", self.bot_name)
        self.chats: dict[str, Chat] = {}
        self._numbers = itertools.count(1)
        self._chat_lock = threading.Lock()

    # ---------------------------------------------------------------- shapes
    def error(self, status: int, code: str, message: str) -> Response:
        if status == 429 or status >= 500:  # a gateway in front of Coze: real HTTP errors
            return Response(status, {"code": status, "msg": message})
        number = int(code) if str(code).isdigit() else 4000
        return Response(status, {"code": number, "msg": message, "detail": {"logid": "20261202000000LOOPBACK"}})

    def not_found(self, request: Request) -> Response:
        return Response(404, {"code": 404, "msg": f"Not Found: {request.path}"})  # the gateway's, no Coze code

    def ok(self, data: Any) -> Response:
        return Response(200, {"code": 0, "msg": "", "data": data, "detail": {"logid": "20261202000000LOOPBACK"}})

    def _auth(self, request: Request) -> Response | None:
        if bearer(request) != self.token:
            return self.error(401, "4100", "authentication is invalid")
        return None

    def _chat_data(self, chat: Chat) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": chat.id,
            "conversation_id": chat.conversation_id,
            "bot_id": self.bot_id,
            "created_at": chat.created_at,
            "status": chat.status,
        }
        if chat.status == "completed":
            prompt = chat.question + "".join(s.text for s, _ in chat.hits)
            inputs, outputs = len(prompt) // 4, 30
            data.update(completed_at=int(time.time()), usage={"token_count": inputs + outputs})
            data["usage"].update(input_count=inputs, output_count=outputs)
        elif chat.status == "failed":
            data.update(failed_at=int(time.time()), last_error={"code": 5000, "msg": "the model service failed"})
        elif chat.status == "requires_action":
            call = {"id": numeric_id("call", chat.id), "type": "function"}
            call["function"] = {"name": "local_lookup", "arguments": json.dumps({"q": chat.question})}
            data["required_action"] = {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": [call]}}
        return data

    def _message(self, chat: Chat, kind: str, content: str) -> dict[str, Any]:
        return {
            "id": numeric_id("message", chat.id, kind),
            "conversation_id": chat.conversation_id,
            "bot_id": self.bot_id,
            "chat_id": chat.id,
            "role": "assistant",
            "type": kind,
            "content": content,
            "content_type": "text",
            "created_at": chat.created_at,
            "updated_at": chat.created_at,
        }

    def recall_content(self, chat: Chat) -> str:
        chunks = [
            {
                "slice": s.text,
                "score": score,
                "meta": {
                    "dataset": {"id": self.dataset_id, "name": self.bot_name},
                    "document": {"id": s.document.id, "name": s.document.name, "format_type": 0, "source_type": 0},
                    "link": {"title": "", "url": ""},
                },
            }
            for s, score in chat.hits
        ]
        data = json.dumps({"chunks": chunks, "ori_req": "", "status_code": 0}, ensure_ascii=False)
        outer = {"msg_type": "knowledge_recall", "data": data}
        if not self.studio:
            outer.update(from_module=None, from_unit=None)
        return json.dumps(outer, ensure_ascii=False)

    # ---------------------------------------------------------------- the chat API
    def create_chat(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        if str(body.get("bot_id") or "") != self.bot_id:
            return self.error(200, "4200", f"Requested resource bot_id={body.get('bot_id')} does not exist")
        if not body.get("user_id"):
            return self.error(200, "4000", "The request parameters are invalid: user_id is required")
        if body.get("stream") is False and body.get("auto_save_history") is not True:
            return self.error(200, "4000", "auto_save_history must be true when stream is false")
        asked = [m for m in body.get("additional_messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        if not asked or not isinstance(asked[-1].get("content"), str):
            return self.error(200, "4000", "additional_messages holds no user message")
        fault = self.fault()
        if isinstance(fault, Response):
            return fault
        if fault is not None and fault.kind == "rate_limited":
            return self.error(200, "4013", "The request frequency exceeds the limit")
        question = asked[-1]["content"]
        with self._chat_lock:
            n = next(self._numbers)
        chat = Chat(numeric_id("chat", str(n)), numeric_id("conversation", str(n)), question, self.steps)
        chat.fault = fault.kind if fault is not None else ""
        chat.hits = self.knowledge.search(question, self.top_n)
        self.chats[chat.id] = chat
        return self.ok(self._chat_data(chat))

    def _chat(self, request: Request) -> Chat | Response:
        if denied := self._auth(request):
            return denied
        chat = self.chats.get(request.query.get("chat_id", ""))
        if chat is None or request.query.get("conversation_id") != chat.conversation_id:
            return self.error(200, "4200", "Requested resource chat_id does not exist")
        return chat

    def retrieve_chat(self, request: Request) -> Response:
        chat = self._chat(request)
        if isinstance(chat, Response):
            return chat
        if chat.status == "in_progress" and chat.fault != "running":
            chat.steps_left -= 1
            if chat.steps_left <= 0:
                ends = {"failed": "failed", "requires_action": "requires_action"}
                chat.status = ends.get(chat.fault, "completed")
        return self.ok(self._chat_data(chat))

    def list_messages(self, request: Request) -> Response:
        chat = self._chat(request)
        if isinstance(chat, Response):
            return chat
        if chat.status != "completed":
            return self.ok([])  # asked too early: nothing final yet
        messages = []
        if chat.fault != "no_recall" and chat.hits:
            messages.append(self._message(chat, "knowledge" if self.studio else "verbose", self.recall_content(chat)))
        messages.append(self._message(chat, "answer", extractive_answer(chat.question, [s for s, _ in chat.hits])))
        finish = {"msg_type": "generate_answer_finish", "data": "", "from_module": None, "from_unit": None}
        messages.append(self._message(chat, "verbose", json.dumps(finish)))
        messages.append(self._message(chat, "follow_up", "What else does the guide say about this?"))
        return self.ok(messages)

    def cancel_chat(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        body = request.body if isinstance(request.body, dict) else {}
        chat = self.chats.get(str(body.get("chat_id") or ""))
        if chat is None:
            return self.error(200, "4200", "Requested resource chat_id does not exist")
        chat.status = "canceled"
        return self.ok(self._chat_data(chat))

    def bot_info(self, request: Request, bot: str) -> Response:
        if denied := self._auth(request):
            return denied
        if bot != self.bot_id:
            return self.error(200, "4200", f"Requested resource bot_id={bot} does not exist")
        knowledge = {"dataset_ids": [self.dataset_id], "auto_call": True, "search_strategy": 0}
        return self.ok(
            {"id": self.bot_id, "name": self.bot_name, "description": "loopback bot", "knowledge": knowledge}
        )

    def bot_online_info(self, request: Request) -> Response:
        """The older route to a bot's description (``?bot_id=``)."""
        if denied := self._auth(request):
            return denied
        bot = request.query.get("bot_id", "")
        if bot != self.bot_id:
            return self.error(200, "4200", f"Requested resource bot_id={bot} does not exist")
        return self.ok({"bot_id": self.bot_id, "name": self.bot_name, "description": "loopback bot", "version": "1"})


def from_args(argv: list[str] | None = None) -> CozeServer:
    """The server the command line describes (the README's walkthrough starts it so)."""
    parser = argparse.ArgumentParser(description="A loopback server speaking Coze's chat API v3 over a folder.")
    parser.add_argument("--port", type=int, default=8888, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--kb", required=True, help="folder of .md/.txt documents: the bot's knowledge base")
    parser.add_argument("--token", default="pat_loopback", help="the access token (Bearer)")
    parser.add_argument(
        "--bot-name",
        default="",
        help="the bot's name (default: '<folder> bot'); the bot ID is derived from it, and printed at start",
    )
    parser.add_argument("--top-n", type=int, default=4, help="slices the bot recalls per question")
    parser.add_argument("--max-chars", type=int, default=200, help="the most characters in one slice")
    parser.add_argument("--steps", type=int, default=1, help="status requests before a chat is completed")
    parser.add_argument("--studio", action="store_true", help="list the recall as Coze Studio does (type knowledge)")
    add_fault_option(parser, KINDS)
    a = parser.parse_args(argv)
    server = CozeServer(
        a.kb,
        token=a.token,
        bot_name=a.bot_name,
        top_n=a.top_n,
        max_chars=a.max_chars,
        steps=a.steps,
        studio=a.studio,
        port=a.port,
    )
    server.inject(*a.faults)
    return server


def main(argv: list[str] | None = None) -> None:
    server = from_args(argv)
    server.serve_forever(
        f"Coze-shaped server on {server.base_url}: bot {server.bot_id} ({server.bot_name!r}), "
        f"{len(server.knowledge.segments)} slices"
    )


if __name__ == "__main__":
    main()
