"""A loopback server that speaks Dify's Service API, over a folder of documents.

    python -m ragtrack.testing.dify_server --port 8080 --kb golden/kb \\
        --app-key app-demo --dataset-key dataset-demo

It stands in for a Dify app with one knowledge base (the folder, re-chunked
Dify's way: see :mod:`ragtrack.testing.knowledge`) in the tests and in the
README walkthrough. Shapes follow Dify's Service API: ``POST /v1/chat-messages``
and ``/completion-messages`` (blocking; streaming for agent-chat apps, which
refuse blocking), ``GET /v1/info``, ``POST /v1/datasets/{id}/retrieve``, and the listings
``GET /v1/datasets``, ``/datasets/{id}/documents`` and
``/documents/{id}/segments`` (paged, with Dify's ``has_more = len == limit``).
Errors are ``{code, message, status}`` with real HTTP statuses; app routes
need the app key, dataset routes the dataset key. Prices are decimal strings.

Faults for tests (``inject``): ``429``, ``500``, ``slow``, ``drop``,
``rate_limit_403`` (Dify Cloud's knowledge rate limit), ``no_metadata`` (a
reply without ``metadata.retriever_resources``) and ``no_citations`` (an empty
list, as recent Dify versions send with citations off).
"""

from __future__ import annotations

import argparse
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

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


class DifyServer(LoopbackServer):
    PREFIX = "/v1"
    ROUTES = [
        ("GET", r"/v1/info", "app_info"),
        ("POST", r"/v1/chat-messages", "chat_messages"),
        ("POST", r"/v1/completion-messages", "completion_messages"),
        ("GET", r"/v1/datasets", "list_datasets"),
        ("POST", rf"/v1/datasets/(?P<dataset>{UUID})/(?:retrieve|hit-testing)", "retrieve"),
        ("GET", rf"/v1/datasets/(?P<dataset>{UUID})/documents", "list_documents"),
        ("GET", rf"/v1/datasets/(?P<dataset>{UUID})/documents/(?P<document>{UUID})/segments", "list_segments"),
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
    def app_info(self, request: Request) -> Response:
        if denied := self._auth(request, self.app_key):
            return denied
        return Response(
            200,
            {
                "name": "loopback app",
                "description": "a stand-in Dify app",
                "tags": [],
                "mode": self.app_mode,
                "author_name": "ragtrack",
            },
        )

    def chat_messages(self, request: Request) -> Response:
        return self._message(request, chat=True)

    def completion_messages(self, request: Request) -> Response:
        return self._message(request, chat=False)

    def _message(self, request: Request, chat: bool) -> Response:
        started = time.monotonic()
        if denied := self._auth(request, self.app_key):
            return denied
        if chat and self.app_mode in ("completion", "workflow"):
            return self.error(400, "not_chat_app", "Please check if your app mode matches the right API route.")
        if not chat and self.app_mode != "completion":
            return self.error(400, "app_unavailable", "App unavailable, please check your app configurations.")
        body = request.body if isinstance(request.body, dict) else {}
        if not isinstance(body.get("inputs"), dict):
            return self.error(400, "invalid_param", "inputs is required")
        if not body.get("user"):
            return self.error(400, "invalid_param", "Arg user must be provided.")
        # A completion app has no query field: its prompt reads the question from an input variable
        # ("query" in Dify's template); a top-level query is ignored, as Dify ignores it.
        question = str((body.get("query") if chat else body["inputs"].get("query")) or "")
        if not question:
            return self.error(400, "invalid_param", "query is required" if chat else "query is required in input form")
        streaming = body.get("response_mode") == "streaming"
        if self.app_mode == "agent-chat" and not streaming:
            return self.error(400, "invalid_param", "Agent Chat App does not support blocking mode")
        fault = self._fault()
        if isinstance(fault, Response):
            return fault

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
        conversation = {"conversation_id": body.get("conversation_id") or str(uuid.uuid4())} if chat else {}
        mode = self.app_mode if chat else "completion"
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


def from_args(argv: list[str] | None = None) -> DifyServer:
    """The server the command line describes (the README's walkthrough starts it so)."""
    parser = argparse.ArgumentParser(description="A loopback server speaking Dify's Service API over a folder.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--kb", required=True, help="folder of .md/.txt documents: the knowledge base")
    parser.add_argument("--app-key", default="app-loopback", help="the app's API key (Bearer)")
    parser.add_argument("--dataset-key", default="dataset-loopback", help="the knowledge API key (Bearer)")
    parser.add_argument("--dataset-name", default="", help="the knowledge base's name (default: the folder's)")
    parser.add_argument("--app-mode", choices=MODES, default="chat")
    parser.add_argument("--top-k", type=int, default=4, help="segments retrieved per question")
    parser.add_argument("--max-chars", type=int, default=400, help="the most characters in one segment")
    parser.add_argument("--no-citations", action="store_true", help="replies without retriever_resources")
    add_fault_option(parser, (*FAULTS, "rate_limit_403", "no_metadata", "no_citations"))
    a = parser.parse_args(argv)
    server = DifyServer(
        a.kb,
        app_key=a.app_key,
        dataset_key=a.dataset_key,
        app_mode=a.app_mode,
        dataset_name=a.dataset_name,
        top_k=a.top_k,
        max_chars=a.max_chars,
        citations=not a.no_citations,
        port=a.port,
    )
    server.inject(*a.faults)
    return server


def main(argv: list[str] | None = None) -> None:
    server = from_args(argv)
    k = server.knowledge
    server.serve_forever(
        f"Dify-shaped {server.app_mode} app on {server.base_url}: knowledge base {server.dataset_name!r} "
        f"({server.dataset_id}), {len(k.documents)} documents, {len(k.segments)} segments"
    )


if __name__ == "__main__":
    main()
