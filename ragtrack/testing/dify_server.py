"""A loopback server that speaks Dify's Service API, over a folder of documents.

    python -m ragtrack.testing.dify_server --port 8080 --kb golden/kb \\
        --app-key app-demo --dataset-key dataset-demo
    python -m ragtrack.testing.dify_server --port 8080 --traffic en   # + 300 conversations of production

It stands in for a Dify app with one knowledge base (the folder, re-chunked
Dify's way: see :mod:`ragtrack.testing.knowledge`) in the tests and in the
README walkthrough. Shapes follow Dify's Service API: ``POST /v1/chat-messages``
and ``/completion-messages`` (blocking; streaming for agent-chat apps, which
refuse blocking), ``GET /v1/info``, ``POST /v1/datasets/{id}/retrieve``, and the listings
``GET /v1/datasets``, ``/datasets/{id}/documents`` and
``/documents/{id}/segments`` (paged, with Dify's ``has_more = len == limit``).
Errors are ``{code, message, status}`` with real HTTP statuses; app routes
need the app key, dataset routes the dataset key. Prices are decimal strings.

Production logs, as Dify's service API serves them (``api/controllers/service_api``):
``GET /v1/app/feedbacks`` (``page``, ``limit`` ≤ 101; ``{"data": [...]}`` newest first, no
``has_more``), ``GET /v1/end-users/{id}`` (the end user's ``type`` and ``session_id``, the ``user``
string the app sent), ``GET /v1/messages?conversation_id&user`` (newest ``limit`` first, returned
oldest first; older pages by ``first_id``; ``has_more``), and ``POST /v1/messages/{id}/feedbacks``.
Conversations are scoped to their end user: a WebApp user (``type = "browser"``) is not a service
API user, so asking for their conversations (or a deleted one) is 404 "Conversation Not Exists.".
``traffic`` seeds a :class:`~ragtrack.testing.traffic.TrafficPlan`: each of its app versions is an
app of its own (key ``app-<version>`` unless ``traffic_keys`` says otherwise); ``log.as_of`` shows
the traffic as it stood at a moment. Chats through ``/chat-messages`` join the conversations too.
What a pull cannot follow, for tests: ``delete_conversation``, ``admin_ratings`` (console ratings),
``forgotten_end_users`` (``/end-users`` answers 404) and ``unlisted`` (messages ``/messages`` leaves out).

Faults for tests (``inject``): ``429``, ``500``, ``slow``, ``drop``,
``rate_limit_403`` (Dify Cloud's knowledge rate limit), ``no_metadata`` (a
reply without ``metadata.retriever_resources``) and ``no_citations`` (an empty
list, as recent Dify versions send with citations off).

Workflow apps (``app_mode = "workflow"``: ``POST /v1/workflows/run``) and chatflows
(``advanced-chat``) run the graph of :mod:`ragtrack.testing.dify_workflow`, streaming every node's
events as Dify does; ``plant`` gives a question node faults, ``workflow_runs`` is what each run did.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ragtrack.production.messages import epoch_ms
from ragtrack.testing.conversations import (
    Conversation,
    ConversationLog,
    Retrieved,
    Turn,
    add_traffic_options,
    traffic_args,
)
from ragtrack.testing.dify_workflow import Route, Workflow, WorkflowRun, parse_fault
from ragtrack.testing.knowledge import Knowledge, Segment, dify_chunks, extractive_answer, stable_id
from ragtrack.testing.server import (
    FAULTS,
    Fault,
    LoopbackServer,
    Request,
    Response,
    add_fault_option,
    bearer,
    page_args,
)

UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
MODES = ("chat", "advanced-chat", "agent-chat", "completion", "workflow")
CHAT_MODES = ("chat", "advanced-chat", "agent-chat")  # the modes /messages answers for
TENANT = str(stable_id("tenant"))
ADMIN = str(stable_id("account", "admin"))


@dataclass(frozen=True)
class App:
    key: str
    name: str
    mode: str

    @property
    def id(self) -> str:
        return str(stable_id("app", self.name))


@dataclass(frozen=True)
class EndUser:
    """Dify's end user: ``service_api`` ones are named by the app (``session_id`` is its ``user``
    string); ``browser`` ones chatted on the app's web page (a session of their own)."""

    app: App
    type: str
    session_id: str

    @property
    def id(self) -> str:
        return str(stable_id("end-user", self.app.id, self.type, self.session_id))


class DifyServer(LoopbackServer):
    PREFIX = "/v1"
    ROUTES = [
        ("GET", r"/v1/info", "app_info"),
        ("POST", r"/v1/chat-messages", "chat_messages"),
        ("POST", r"/v1/completion-messages", "completion_messages"),
        ("POST", r"/v1/workflows/run", "workflows_run"),
        ("GET", r"/v1/datasets", "list_datasets"),
        ("POST", rf"/v1/datasets/(?P<dataset>{UUID})/(?:retrieve|hit-testing)", "retrieve"),
        ("GET", rf"/v1/datasets/(?P<dataset>{UUID})/documents", "list_documents"),
        ("GET", rf"/v1/datasets/(?P<dataset>{UUID})/documents/(?P<document>{UUID})/segments", "list_segments"),
        ("GET", r"/v1/app/feedbacks", "app_feedbacks"),
        ("GET", rf"/v1/end-users/(?P<end_user>{UUID})", "end_user"),
        ("GET", r"/v1/messages", "list_messages"),
        ("POST", rf"/v1/messages/(?P<message>{UUID})/feedbacks", "message_feedback"),
    ]

    def __init__(
        self,
        kb: str | Path,
        *,
        app_key: str = "app-loopback",
        dataset_key: str = "dataset-loopback",
        app_mode: str = "chat",
        dataset_name: str = "",
        top_k: int = 4,
        max_chars: int = 400,
        citations: bool = True,
        traffic=None,
        traffic_keys: dict[str, str] | None = None,
        routes: tuple[Route, ...] = (),
        answer_output: str = "answer",
        port: int = 0,
    ):
        super().__init__(port)
        if app_mode not in MODES:
            raise ValueError(f"app_mode must be one of {MODES}")
        self.app_key, self.dataset_key, self.app_mode = app_key, dataset_key, app_mode
        self.top_k, self.citations = top_k, citations
        self.knowledge = Knowledge(kb, dify_chunks, max_chars)
        self.dataset_name = dataset_name or Path(kb).resolve().name
        self.dataset_id = str(stable_id("dataset", self.dataset_name))
        self.apps: dict[str, App] = {}  # the traffic's apps by key (the main app is app_key's, which tests change)
        self.log = ConversationLog.from_plan(traffic) if traffic is not None else ConversationLog()
        for version in traffic.app_versions if traffic is not None else ():
            key = (traffic_keys or {}).get(version, f"app-{version}")
            self.apps[key] = App(key, version, "chat")
        self.admin_ratings: dict[str, str] = {}  # message ID → a rating given in the Dify console
        self.forgotten_end_users: set[str] = set()  # end-user IDs /end-users answers 404 for
        self.unlisted: set[str] = set()  # message IDs /messages leaves out (their feedbacks stay listed)
        # workflow and advanced-chat apps run a graph (see dify_workflow): one class per document unless told
        routes = routes or tuple(Route(Path(d.name).stem, (d.name,)) for d in self.knowledge.documents)
        chat = app_mode == "advanced-chat"
        self.workflow = Workflow(self.knowledge, routes, self.dataset_name, top_k, chat)
        self.answer_output = answer_output
        self.planted: dict[str, tuple[str, ...]] = {}
        self.workflow_runs: list[WorkflowRun] = []  # what the graph did, question by question

    def plant(self, question: str, *faults: str) -> None:
        """Node faults the workflow meets whenever it is asked ``question`` (see dify_workflow)."""
        self.planted[question] = tuple(parse_fault(f) for f in faults)

    def _run_workflow(self, question: str) -> WorkflowRun:
        run = self.workflow.run(question, self.planted.get(question, ()))
        with self._lock:
            self.workflow_runs.append(run)
        return run

    def delete_conversation(self, conversation_id: str) -> None:
        """What deleting it in Dify does: its messages are gone, its feedbacks are still listed."""
        self.log.conversations[conversation_id].deleted = True

    def end_user_id(self, app_name: str, conversation_id: str) -> str:
        """The end-user ID Dify's feedbacks name for a conversation of the app ``app_name``."""
        app = next(a for a in self.apps.values() if a.name == app_name)
        return self._end_user(app, self.log.conversations[conversation_id]).id

    # ---------------------------------------------------------------- shapes
    def error(self, status: int, code: str, message: str) -> Response:
        return Response(status, {"code": code, "message": message, "status": status})

    def not_found(self, request: Request) -> Response:
        return self.error(404, "not_found", "The requested URL was not found on the server.")

    def _fault(self) -> Response | Fault | None:
        """The next injected fault; Dify Cloud's knowledge rate limit is a 403, not a 429."""
        fault = self.fault()
        if isinstance(fault, Fault) and fault.kind == "rate_limit_403":
            message = "Sorry, you have reached the knowledge base request rate limit of your subscription."
            return self.error(403, "forbidden", message)
        return fault

    def _auth(self, request: Request, key: str) -> Response | None:
        token = bearer(request)
        if token is None:
            reply = self.error(401, "unauthorized", "Authorization header must be provided and start with 'Bearer'")
        elif token != key:  # an unknown key, or a key of the other type (app vs dataset)
            reply = self.error(401, "unauthorized", "Access token is invalid")
        else:
            return None
        reply.headers["WWW-Authenticate"] = 'Bearer realm="api"'
        return reply

    def _resource(self, n: int, segment: Segment, score: float) -> dict[str, Any]:
        return {
            "position": n,
            "dataset_id": self.dataset_id,
            "dataset_name": self.dataset_name,
            "document_id": segment.document.id,
            "document_name": segment.document.name,
            "data_source_type": "upload_file",
            "segment_id": segment.id,
            "retriever_from": "api",
            "score": score,
            "hit_count": None,
            "word_count": None,
            "segment_position": None,
            "index_node_hash": None,
            "content": segment.text,
            "page": None,
            "doc_metadata": None,
            "title": None,
            "files": None,
            "summary": None,
        }

    @staticmethod
    def _usage(prompt: str, answer: str, latency: float) -> dict[str, Any]:
        tokens_in, tokens_out = max(1, len(prompt) // 4), max(1, len(answer) // 4)
        price_in, price_out = Decimal(tokens_in) * Decimal("0.000001"), Decimal(tokens_out) * Decimal("0.000002")
        return {
            "prompt_tokens": tokens_in,
            "prompt_unit_price": "0.001",
            "prompt_price_unit": "0.001",
            "prompt_price": format(price_in, "f"),
            "completion_tokens": tokens_out,
            "completion_unit_price": "0.002",
            "completion_price_unit": "0.001",
            "completion_price": format(price_out, "f"),
            "total_tokens": tokens_in + tokens_out,
            "total_price": format(price_in + price_out, "f"),
            "currency": "USD",
            "latency": round(latency, 3),
            "time_to_first_token": None,
            "time_to_generate": None,
        }

    # ---------------------------------------------------------------- app routes
    def _app(self, request: Request) -> App | Response:
        """The app the request's key selects, or the 401 Dify answers."""
        token = bearer(request)
        if token in self.apps:
            return self.apps[token]
        return self._auth(request, self.app_key) or App(self.app_key, "loopback app", self.app_mode)

    def app_info(self, request: Request) -> Response:
        if isinstance(app := self._app(request), Response):
            return app
        return Response(
            200,
            {
                "name": app.name,
                "description": "a stand-in Dify app",
                "tags": [],
                "mode": app.mode,
                "author_name": "ragtrack",
            },
        )

    def _run_args(self, body: dict) -> Response | None:
        """The 400 Dify answers a run without ``inputs`` or ``user`` (chat, completion and workflow alike)."""
        if not isinstance(body.get("inputs"), dict):
            return self.error(400, "invalid_param", "inputs is required")
        if not body.get("user"):
            return self.error(400, "invalid_param", "Arg user must be provided.")
        return None

    def chat_messages(self, request: Request) -> Response:
        return self._message(request, chat=True)

    def completion_messages(self, request: Request) -> Response:
        return self._message(request, chat=False)

    def _message(self, request: Request, chat: bool) -> Response:
        started = time.monotonic()
        if isinstance(app := self._app(request), Response):
            return app
        if chat and app.mode in ("completion", "workflow"):
            return self.error(400, "not_chat_app", "Please check if your app mode matches the right API route.")
        if not chat and app.mode != "completion":
            return self.error(400, "app_unavailable", "App unavailable, please check your app configurations.")
        body = request.body if isinstance(request.body, dict) else {}
        if problem := self._run_args(body):
            return problem
        # A completion app has no query field: its prompt reads the question from an input variable
        # ("query" in Dify's template); a top-level query is ignored, as Dify ignores it.
        question = str((body.get("query") if chat else body["inputs"].get("query")) or "")
        if not question:
            return self.error(400, "invalid_param", "query is required" if chat else "query is required in input form")
        streaming = body.get("response_mode") == "streaming"
        if app.mode == "agent-chat" and not streaming:
            return self.error(400, "invalid_param", "Agent Chat App does not support blocking mode")
        asked_in = body.get("conversation_id") or None
        if chat and asked_in and not self._conversation(app, EndUser(app, "service_api", str(body["user"])), asked_in):
            return self.error(404, "not_found", "Conversation Not Exists.")
        fault = self._fault()
        if isinstance(fault, Response):
            return fault

        if app.mode == "advanced-chat" and app.key == self.app_key:
            return self._chatflow(question, streaming)
        hits = self.knowledge.search(question, self.top_k)
        answer = extractive_answer(question, [s for s, _ in hits])
        metadata: dict[str, Any] = {"annotation_reply": None}
        if self.citations and not (fault is not None and fault.kind == "no_metadata"):
            no_citations = fault is not None and fault.kind == "no_citations"
            metadata["retriever_resources"] = (
                [] if no_citations else [self._resource(n, s, score) for n, (s, score) in enumerate(hits, start=1)]
            )
        prompt = question + "".join(s.text for s, _ in hits)
        metadata["usage"] = self._usage(prompt, answer, time.monotonic() - started)
        message_id, task_id = str(uuid.uuid4()), str(uuid.uuid4())
        conversation = {}
        if chat:  # kept, as Dify keeps it: /messages lists it, /messages/{id}/feedbacks rates it
            retrieved = [Retrieved(s.id, s.document.id, s.document.name, s.text, score) for s, score in hits]
            turn = Turn(message_id, question, answer, retrieved, self.log.now())
            held = self.log.answer(app.name, str(body["user"]), "api", asked_in, turn)
            conversation = {"conversation_id": held.id}
        mode = app.mode if chat else "completion"
        if streaming:
            head = {"task_id": task_id, "id": message_id, "message_id": message_id, **conversation}
            words = answer.split(" ")
            events = [
                {
                    "event": "agent_message" if mode == "agent-chat" else "message",
                    **head,
                    "answer": w + (" " if i < len(words) - 1 else ""),
                    "created_at": int(time.time()),
                }
                for i, w in enumerate(words)
            ]
            events.append({"event": "message_end", **head, "metadata": metadata, "files": []})
            return Response(200, events=events)
        return _blocking_message(task_id, message_id, conversation, mode, answer, metadata)

    def _chatflow(self, question: str, streaming: bool) -> Response:
        """A chatflow's reply: the node events and the answer's chunks, or (blocking) the message with
        its ``retriever_resources`` and usage from ``message_end``."""
        run = self._run_workflow(question)
        task_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        events = self.workflow.events(run, task_id, message_id, self.answer_output)
        if streaming:
            return Response(200, events=events)
        if run.failed:
            error = next(n.error for n in run.nodes if n.error)
            return self.error(400, "completion_request_error", str(error))
        end = next(e for e in events if e["event"] == "message_end")
        conversation = {"conversation_id": events[0]["conversation_id"]}
        return _blocking_message(task_id, message_id, conversation, "advanced-chat", run.answer, end["metadata"])

    def workflows_run(self, request: Request) -> Response:
        """``POST /v1/workflows/run``: a workflow app's run, streamed node by node or blocking (Dify's
        WorkflowAppBlockingResponse: the outputs, no nodes)."""
        if isinstance(app := self._app(request), Response):
            return app
        if app.mode != "workflow":
            return self.error(400, "not_workflow_app", "Please check if your app mode matches the right API route.")
        body = request.body if isinstance(request.body, dict) else {}
        if problem := self._run_args(body):
            return problem
        question = str(body["inputs"].get("query") or "")
        if not question:
            return self.error(400, "invalid_param", "query is required in input form")
        if isinstance(fault := self._fault(), Response):
            return fault
        run = self._run_workflow(question)
        events = self.workflow.events(run, str(uuid.uuid4()), None, self.answer_output)
        if body.get("response_mode") == "streaming":
            return Response(200, events=events)
        finished = events[-1]
        data = {
            k: finished["data"][k]
            for k in (
                "id",
                "workflow_id",
                "status",
                "outputs",
                "error",
                "elapsed_time",
                "total_tokens",
                "total_steps",
                "created_at",
                "finished_at",
            )
        }
        return Response(
            200, {"task_id": finished["task_id"], "workflow_run_id": finished["workflow_run_id"], "data": data}
        )

    # ---------------------------------------------------------------- production logs
    def _end_user(self, app: App, c: Conversation) -> EndUser:
        if c.channel == "webapp":  # the app's web page: Dify made the user a browser session
            return EndUser(app, "browser", str(stable_id("webapp-session", c.user)))
        return EndUser(app, "service_api", c.user)

    def _conversation(self, app: App, user: EndUser, conversation_id: str) -> Conversation | None:
        """The conversation if ``user`` may read it, as Dify's ConversationService.get_conversation decides."""
        c = self.log.conversations.get(conversation_id)
        if c is None or c.app != app.name or c.deleted or not self.log.visible(c) or self._end_user(app, c) != user:
            return None
        return c

    def _production_route(self, request: Request, chat_only: bool = False) -> App | Response:
        if isinstance(app := self._app(request), Response):
            return app
        if chat_only and app.mode not in CHAT_MODES:
            return self.error(400, "not_chat_app", "Please check if your app mode matches the right API route.")
        return fault if isinstance(fault := self._fault(), Response) else app

    def _query_int(self, request: Request, name: str, default: int, most: int) -> int | Response:
        try:
            value = int(request.query.get(name, default))
        except ValueError:
            value = 0
        if not 1 <= value <= most:
            return self.error(400, "invalid_param", f"{name}: Input should be between 1 and {most}")
        return value

    def app_feedbacks(self, request: Request) -> Response:
        if isinstance(app := self._production_route(request), Response):
            return app
        page, limit = self._query_int(request, "page", 1, 10**9), self._query_int(request, "limit", 20, 101)
        if isinstance(bad := page if isinstance(page, Response) else limit, Response):
            return bad
        feedbacks = []
        for c in self.log.of_app(app.name, deleted=True):  # a deleted conversation's feedbacks stay listed
            user = self._end_user(app, c).id
            for t in self.log.visible(c):
                rating, comment, first, last = t.rating(self.log.as_of)
                if rating:
                    feedbacks.append(_feedback(app, c, t, rating, comment, first, last, user))
                if t.id in self.admin_ratings:
                    feedbacks.append(_feedback(app, c, t, self.admin_ratings[t.id], None, t.created_at, t.created_at))
        feedbacks.sort(key=lambda f: (f["created_at"], f["id"]), reverse=True)  # created_at desc, id desc
        return Response(200, {"data": feedbacks[(page - 1) * limit : page * limit]})

    def end_user(self, request: Request, end_user: str) -> Response:
        if isinstance(app := self._production_route(request), Response):
            return app
        users = {u.id: (u, c) for c in self.log.of_app(app.name, deleted=True) for u in [self._end_user(app, c)]}
        if end_user not in users or end_user in self.forgotten_end_users:
            return self.error(404, "end_user_not_found", "End user not found.")
        user, first = users[end_user]
        return Response(
            200,
            {
                "id": user.id,
                "tenant_id": TENANT,
                "app_id": app.id,
                "type": user.type,
                "external_user_id": None,
                "name": None,
                "is_anonymous": user.type == "browser",
                "session_id": user.session_id,
                "created_at": _naive(first.created_at),
                "updated_at": _naive(first.created_at),
            },
        )

    def list_messages(self, request: Request) -> Response:
        if isinstance(app := self._production_route(request, chat_only=True), Response):
            return app
        if isinstance(limit := self._query_int(request, "limit", 20, 100), Response):
            return limit
        if not request.query.get("conversation_id"):
            return self.error(400, "invalid_param", "conversation_id: Field required")
        user = EndUser(app, "service_api", request.query.get("user") or "DEFAULT-USER")
        c = self._conversation(app, user, request.query["conversation_id"])
        if c is None:
            return self.error(404, "not_found", "Conversation Not Exists.")
        turns = [t for t in self.log.visible(c) if t.id not in self.unlisted]
        if first_id := request.query.get("first_id"):
            ids = [t.id for t in turns]
            if first_id not in ids:
                return self.error(404, "not_found", "First Message Not Exists.")
            turns = turns[: ids.index(first_id)]
        shown = turns[-limit:]  # the newest `limit` before first_id, oldest first
        data = [self._listed(c, t, turns[turns.index(t) - 1].id if turns.index(t) else None) for t in shown]
        return Response(200, {"limit": limit, "has_more": len(turns) > limit, "data": data})

    def _listed(self, c: Conversation, t: Turn, parent: str | None) -> dict[str, Any]:
        """A message as ``/messages`` lists it (Dify's MessageListItem)."""
        rating = t.rating(self.log.as_of)[0]
        created = epoch_ms(t.created_at) // 1000
        resources = [
            {
                "id": str(stable_id("resource", t.id, str(n))),
                "message_id": t.id,
                "position": n,
                "dataset_id": self.dataset_id,
                "dataset_name": self.dataset_name,
                "document_id": r.document_id,
                "document_name": r.document_name,
                "data_source_type": "upload_file",
                "segment_id": r.id,
                "score": r.score,
                "hit_count": 1,
                "word_count": len(r.text),
                "segment_position": n,
                "index_node_hash": str(stable_id("hash", r.text)).replace("-", ""),
                "content": r.text,
                "summary": None,
                "created_at": created,
            }
            for n, r in enumerate(t.retrieved, start=1)
        ]
        return {
            "id": t.id,
            "conversation_id": c.id,
            "parent_message_id": parent,
            "inputs": {},
            "query": t.question,
            "answer": t.answer,
            "feedback": {"rating": rating} if rating else None,
            "retriever_resources": resources,
            "created_at": created,
            "agent_thoughts": [],
            "message_files": [],
            "message_tokens": max(1, len(t.question) // 4),
            "answer_tokens": max(1, len(t.answer) // 4),
            "provider_response_latency": 1.2,
            "total_price": "0.0000420",
            "currency": "USD",
            "status": "normal",
            "error": None,
            "extra_contents": [],
        }

    def message_feedback(self, request: Request, message: str) -> Response:
        if isinstance(app := self._production_route(request), Response):
            return app
        body = request.body if isinstance(request.body, dict) else {}
        if not body.get("user"):
            return self.error(400, "invalid_param", "user: Field required")
        if body.get("rating") not in ("like", "dislike", None):
            return self.error(400, "invalid_param", "rating: Input should be 'like' or 'dislike'")
        found = self.log.find(message)
        user = EndUser(app, "service_api", str(body["user"]))
        if found is None or self._conversation(app, user, found[0].id) is None:
            return self.error(404, "not_found", "Message Not Exists.")
        turn = found[1]
        if body.get("rating") is None and turn.rating(self.log.as_of)[0] is None:
            return self.error(400, "invalid_param", "rating cannot be None when feedback not exists")
        self.log.rate(turn, body.get("rating"), body.get("content"))
        return Response(200, {"result": "success"})

    # ---------------------------------------------------------------- knowledge routes
    def _dataset(self, request: Request, dataset: str) -> Response | None:
        if denied := self._auth(request, self.dataset_key):
            return denied
        if dataset != self.dataset_id:
            return self.error(404, "not_found", "Dataset not found.")
        return None

    def retrieve(self, request: Request, dataset: str) -> Response:
        if problem := self._dataset(request, dataset):
            return problem
        if isinstance(fault := self._fault(), Response):
            return fault
        body = request.body if isinstance(request.body, dict) else {}
        query = str(body.get("query") or "")
        if not query:
            return self.error(400, "invalid_param", "Query or attachment_ids is required")
        if len(query) > 250:
            return self.error(400, "invalid_param", "Query cannot exceed 250 characters")
        model = body.get("retrieval_model")
        if model is not None:
            missing = [
                k for k in ("search_method", "reranking_enable", "top_k", "score_threshold_enabled") if k not in model
            ]
            if missing:
                return self.error(400, "invalid_param", f"retrieval_model.{missing[0]}: Field required")
        top_k = int((model or {}).get("top_k") or self.top_k)
        records = [
            {
                "segment": {
                    **self._segment(s),
                    "document": {
                        "id": s.document.id,
                        "data_source_type": "upload_file",
                        "name": s.document.name,
                        "doc_type": None,
                        "doc_metadata": None,
                    },
                },
                "child_chunks": [],
                "score": score,
                "tsne_position": None,
                "files": [],
                "summary": None,
            }
            for s, score in self.knowledge.search(query, top_k)
        ]
        return Response(200, {"query": {"content": query}, "records": records})

    def _segment(self, s: Segment) -> dict[str, Any]:
        created = 1718000000 + s.document.position
        return {
            "id": s.id,
            "position": s.position,
            "document_id": s.document.id,
            "content": s.text,
            "sign_content": s.text,
            "answer": None,
            "word_count": len(s.text),
            "tokens": max(1, len(s.text) // 4),
            "keywords": [],
            "index_node_id": str(stable_id("node", s.id)),
            "index_node_hash": str(stable_id("hash", s.text)).replace("-", ""),
            "hit_count": 0,
            "enabled": True,
            "disabled_at": None,
            "disabled_by": None,
            "status": "completed",
            "created_by": str(stable_id("user")),
            "created_at": created,
            "updated_at": created,
            "updated_by": None,
            "indexing_at": created,
            "completed_at": created,
            "error": None,
            "stopped_at": None,
            "child_chunks": [],
        }

    @staticmethod
    def _page(request: Request, items: list, extra: dict | None = None) -> Response:
        page, limit = page_args(request, "limit", 20)
        chunk = items[(page - 1) * limit : page * limit]
        # Dify's quirk, kept on purpose: has_more is "this page is full", even when it is the last one.
        return Response(
            200,
            {
                "data": chunk,
                **(extra or {}),
                "has_more": len(chunk) == limit,
                "limit": limit,
                "total": len(items),
                "page": page,
            },
        )

    def list_datasets(self, request: Request) -> Response:
        if denied := self._auth(request, self.dataset_key):
            return denied
        docs = self.knowledge.documents
        dataset = {
            "id": self.dataset_id,
            "name": self.dataset_name,
            "description": "loopback knowledge base",
            "provider": "vendor",
            "permission": "only_me",
            "data_source_type": "upload_file",
            "indexing_technique": "high_quality",
            "app_count": 1,
            "document_count": len(docs),
            "word_count": sum(len(s.text) for s in self.knowledge.segments),
            "created_by": str(stable_id("user")),
            "created_at": 1718000000,
            "updated_by": None,
            "updated_at": 1718000000,
            "embedding_model": "loopback-bm25",
            "embedding_model_provider": "loopback",
            "embedding_available": True,
            "doc_form": "text_model",
        }
        return self._page(request, [dataset])

    def list_documents(self, request: Request, dataset: str) -> Response:
        if problem := self._dataset(request, dataset):
            return problem
        # Dify orders by created_at desc, then position desc: newest first.
        docs = sorted(self.knowledge.documents, key=lambda d: -d.position)
        items = [
            {
                "id": d.id,
                "position": d.position,
                "data_source_type": "upload_file",
                "data_source_info": {"upload_file_id": str(stable_id("file", d.name))},
                "dataset_process_rule_id": str(stable_id("rule")),
                "name": d.name,
                "created_from": "web",
                "created_by": str(stable_id("user")),
                "created_at": 1718000000 + d.position,
                "tokens": sum(len(s.text) // 4 for s in d.segments),
                "indexing_status": "completed",
                "error": None,
                "enabled": True,
                "disabled_at": None,
                "disabled_by": None,
                "archived": False,
                "display_status": "available",
                "word_count": sum(len(s.text) for s in d.segments),
                "hit_count": 0,
                "doc_form": "text_model",
            }
            for d in docs
        ]
        return self._page(request, items)

    def list_segments(self, request: Request, dataset: str, document: str) -> Response:
        if problem := self._dataset(request, dataset):
            return problem
        doc = next((d for d in self.knowledge.documents if d.id == document), None)
        if doc is None:
            return self.error(404, "not_found", "Document not found.")
        return self._page(request, [self._segment(s) for s in doc.segments], {"doc_form": "text_model"})


def _blocking_message(
    task_id: str, message_id: str, conversation: dict, mode: str, answer: str, metadata: dict
) -> Response:
    """A blocking chat or completion reply (Dify's ChatbotAppBlockingResponse, flattened as the API sends it)."""
    return Response(
        200,
        {
            "event": "message",
            "task_id": task_id,
            "id": message_id,
            "message_id": message_id,
            **conversation,
            "mode": mode,
            "answer": answer,
            "metadata": metadata,
            "created_at": int(time.time()),
        },
    )


def _naive(iso: str) -> str:
    """A UTC time as Dify serialises its naive UTC datetimes: ``2025-06-02T09:30:00``."""
    return iso.removesuffix("Z")


def _feedback(
    app: App,
    c: Conversation,
    t: Turn,
    rating: str,
    comment: str | None,
    created: str,
    updated: str,
    end_user: str | None = None,
) -> dict[str, Any]:
    """One feedback as ``/app/feedbacks`` lists it (MessageFeedback.to_dict): an end user's, or an admin's
    from the console (``end_user`` None)."""
    source = "user" if end_user else "admin"
    return {
        "id": str(stable_id("feedback", t.id, source)),
        "app_id": app.id,
        "conversation_id": c.id,
        "message_id": t.id,
        "rating": rating,
        "content": comment,
        "from_source": source,
        "from_end_user_id": end_user,
        "from_account_id": None if end_user else ADMIN,
        "created_at": _naive(created),
        "updated_at": _naive(updated),
    }


def _route(text: str) -> Route:
    name, _, prefixes = text.partition("=")
    if not name or not prefixes:
        raise argparse.ArgumentTypeError(f"expected CLASS=PREFIX[,PREFIX], got {text!r}")
    return Route(name, tuple(p.strip() for p in prefixes.split(",") if p.strip()))


def _planted(text: str) -> tuple[str, str]:
    question, _, fault = text.rpartition(" => ")
    try:
        return question.strip(), parse_fault(fault.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def from_args(argv: list[str] | None = None) -> DifyServer:
    """The server the command line describes (the README's walkthrough starts it so)."""
    parser = argparse.ArgumentParser(description="A loopback server speaking Dify's Service API over a folder.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--kb", help="folder of .md/.txt documents: the knowledge base")
    parser.add_argument("--app-key", default="app-loopback", help="the app's API key (Bearer)")
    parser.add_argument("--dataset-key", default="dataset-loopback", help="the knowledge API key (Bearer)")
    parser.add_argument("--dataset-name", default="", help="the knowledge base's name (default: the folder's)")
    parser.add_argument("--app-mode", choices=MODES, default="chat")
    parser.add_argument("--top-k", type=int, default=4, help="segments retrieved per question")
    parser.add_argument("--max-chars", type=int, default=400, help="the most characters in one segment")
    parser.add_argument("--no-citations", action="store_true", help="replies without retriever_resources")
    workflow = {
        "--route": (
            _route,
            "CLASS=PREFIX[,PREFIX]",
            "a class of the question classifier and the documents of its knowledge base (default: one class "
            "per document)",
        ),
        "--plant": (
            _planted,
            "'QUESTION => FAULT'",
            "a node fault the question meets every time it is asked: drop_term:TERM, misroute, "
            "empty_retrieval, unfaithful or fail:NODE TITLE",
        ),
    }
    for flag, (parse, metavar, what) in workflow.items():
        parser.add_argument(
            flag, action="append", default=[], type=parse, metavar=metavar, help=f"workflow apps: {what} (repeatable)"
        )
    parser.add_argument(
        "--answer-output", default="answer", help="workflow apps: the End node's variable holding the answer"
    )
    add_traffic_options(parser)
    add_fault_option(parser, (*FAULTS, "rate_limit_403", "no_metadata", "no_citations"))
    a = parser.parse_args(argv)
    plan, kb = traffic_args(a, parser)
    server = DifyServer(
        kb,
        app_key=a.app_key,
        dataset_key=a.dataset_key,
        app_mode=a.app_mode,
        dataset_name=a.dataset_name,
        top_k=a.top_k,
        max_chars=a.max_chars,
        citations=not a.no_citations,
        traffic=plan,
        routes=tuple(a.route),
        answer_output=a.answer_output,
        port=a.port,
    )
    for question, fault in a.plant:
        server.plant(question, *server.planted.get(question, ()), fault)
    server.log.as_of = a.as_of
    server.inject(*a.faults)
    return server


def main(argv: list[str] | None = None) -> None:
    server = from_args(argv)
    k = server.knowledge
    flow = ""
    if server.app_mode in ("workflow", "advanced-chat"):
        flow = f"; question classes: {', '.join(r.name for r in server.workflow.routes)}"
    apps = "".join(
        f"; {app.name} (key {app.key}): {len(server.log.of_app(app.name))} conversations"
        for app in server.apps.values()
    )
    server.serve_forever(
        f"Dify-shaped {server.app_mode} app on {server.base_url}: knowledge base {server.dataset_name!r} "
        f"({server.dataset_id}), {len(k.documents)} documents, {len(k.segments)} segments{apps}{flow}"
    )


if __name__ == "__main__":
    main()
