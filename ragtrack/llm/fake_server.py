"""A loopback OpenAI-compatible chat server with fault injection, for tests and benchmarks.

It binds 127.0.0.1 only, speaks ``POST /v1/chat/completions`` well enough for
the ``openai`` client, and can misbehave on purpose: 429 with Retry-After,
500, a slow reply, a malformed or truncated body, a runaway generation, or
rejecting a JSON mode the way some real servers do. ``capacity=1`` makes it
serve one request at a time like a local llama.cpp server, so queueing shows
up as latency; ``declare_slots=True`` also tells its capacity the way llama.cpp's
server does (``GET /props`` → ``total_slots``; without it, 404 as hosted APIs
answer). It records every request it saw and the peak number in flight.

    with FakeOpenAIServer(reply=lambda req: '{"score": 4, "reason": "ok"}') as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], str]


def default_reply(request: dict[str, Any]) -> str:
    """A plausible reply for each ragtrack step, recognised from its prompt."""
    text = " ".join(m.get("content", "") for m in request.get("messages", [])).lower()
    if '"score"' in text:
        return '{"score": 4, "reason": "mostly supported"}'
    if '"queries"' in text:
        return '{"queries": ["first rewrite", "second rewrite"]}'
    if '"topics"' in text:
        return '{"topics": ["settings", "defaults"]}'
    if '"pairs"' in text:
        return '{"pairs": [{"question": "What is this section about?", "answer": "Its main setting."}]}'
    if "outline" in text and "one point per line" in text:
        return "- what it is\n- how to set it"
    return "Use the default value described in the reference material."


@dataclass
class Fault:
    """One injected misbehaviour, consumed by the next request."""

    # "429" | "500" | "503" | "400" | "401" | "404" | "slow" | "malformed" | "truncated" | "runaway" | "drop"
    kind: str
    seconds: float = 0.0  # Retry-After for 429, delay for "slow"


@dataclass
class ServerLog:
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    gets: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, headers) of each GET
    in_flight: int = 0
    peak_in_flight: int = 0
    served: int = 0
    faults_served: int = 0


class FifoSlots:
    """At most ``n`` holders at once, admitted in arrival order, as a real server's request queue
    does. (A ``threading.Semaphore`` lets a newcomer take a freed slot ahead of older waiters: at a
    one-slot server a request sent late then came back unqueued, which no real queue does.)"""

    def __init__(self, n: int):
        self._free = n
        self._line: deque[object] = deque()
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        ticket = object()
        with self._cond:
            self._line.append(ticket)
            while self._line[0] is not ticket or not self._free:
                self._cond.wait()
            self._line.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may find a free slot too

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class FakeOpenAIServer:
    def __init__(
        self,
        reply: Reply = default_reply,
        *,
        latency_s: float = 0.0,
        latency_spread: float = 0.0,
        capacity: int | None = None,
        declare_slots: bool = False,
        reject_json_modes: tuple[str, ...] = (),
        reject_status: int = 500,
        fault_rate: float = 0.0,
        seed: int = 0,
    ):
        self.reply = reply
        self.latency_s = latency_s
        # Real replies vary in length: each takes latency_s × (1 ± up to latency_spread), uniformly, mean latency_s.
        self.latency_spread = latency_spread
        # e.g. ("json_schema",): answer those with HTTP 500 (llama.cpp's Python server) or 400 (most others)
        self.reject_json_modes, self.reject_status = reject_json_modes, reject_status
        self.faults: deque[Fault] = deque()
        self.fault_rate = fault_rate  # random faults, for soak tests and benchmarks
        self._random = random.Random(seed)
        self.log = ServerLog()
        self._lock = threading.Lock()
        self._serve = FifoSlots(capacity) if capacity else None
        self.declared_slots = capacity if declare_slots else None
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def _latency(self) -> float:
        if not self.latency_spread:
            return self.latency_s  # no draw: seeded fault sequences stay what they were
        with self._lock:
            return self.latency_s * (1 + self.latency_spread * self._random.uniform(-1, 1))

    def inject(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ internals
    def _next_fault(self) -> Fault | None:
        with self._lock:
            if self.faults:
                return self.faults.popleft()
            if self.fault_rate and self._random.random() < self.fault_rate:
                kind = self._random.choice(["429", "500", "slow", "malformed", "truncated"])
                return Fault(kind, 0.2 if kind in ("429", "slow") else 0.0)
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes; with Nagle's algorithm on, the body waits for the
            # client's delayed ACK of the headers (40 ms on Linux) on every reply. Real servers
            # (uvicorn under vLLM, Go's net/http under Ollama) set TCP_NODELAY, and so does this one.
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with server._lock:
                    server.log.gets.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                if self.path == "/props" and server.declared_slots:
                    # The part of llama.cpp's answer ragtrack reads (total_slots), and some of the rest.
                    props = {
                        "default_generation_settings": {"n_ctx": 4096},
                        "total_slots": server.declared_slots,
                        "model_path": "loopback.gguf",
                        "build_info": "loopback",
                    }
                    return self._send(200, props)
                self._send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.log.requests.append(body)
                    server.log.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.log.in_flight += 1
                    server.log.peak_in_flight = max(server.log.peak_in_flight, server.log.in_flight)
                try:
                    if server._serve:
                        with server._serve:
                            self._answer(body)
                    else:
                        self._answer(body)
                finally:
                    with server._lock:
                        server.log.in_flight -= 1

            def _answer(self, body: dict[str, Any]) -> None:
                mode = (body.get("response_format") or {}).get("type")
                if mode == "json_object" and "schema" in (body.get("response_format") or {}):
                    mode = "json_object_schema"
                if mode in server.reject_json_modes:
                    return self._send(
                        server.reject_status, {"error": {"message": f"response_format {mode} not supported"}}
                    )
                fault = server._next_fault()
                if server.latency_s:
                    time.sleep(server._latency())
                if fault is not None:
                    with server._lock:
                        server.log.faults_served += 1
                    if fault.kind == "429":
                        headers = {"Retry-After": str(fault.seconds)} if fault.seconds else {}
                        return self._send(429, {"error": {"message": "rate limited"}}, headers)
                    if fault.kind == "401":  # like OpenAI, quote the key that was sent
                        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                        return self._send(401, {"error": {"message": f"Incorrect API key provided: {key}"}})
                    if fault.kind == "404":  # a model name the server does not serve, as vLLM and OpenAI say it
                        message = f"The model `{body.get('model')}` does not exist."
                        return self._send(404, {"error": {"message": message, "code": "model_not_found"}})
                    if fault.kind == "400":  # a request this endpoint will not take (too long, say)
                        return self._send(400, {"error": {"message": "bad request"}})
                    if fault.kind in ("500", "503"):
                        return self._send(int(fault.kind), {"error": {"message": "server error"}})
                    if fault.kind == "slow":
                        time.sleep(fault.seconds)
                    if fault.kind == "malformed":
                        return self._raw(200, b'{"id": "x", "choices": [{"message": ')
                    if fault.kind == "truncated":
                        return self._raw(200, b'{"id": "x", "choi', declared=400)
                    if fault.kind == "drop":
                        self.close_connection = True
                        return
                text = server.reply(body)
                finish = "stop"
                if fault is not None and fault.kind == "runaway":  # generated up to the token cap
                    text, finish = (text + " and so on" * 2000)[: 4 * int(body.get("max_tokens") or 4096)], "length"
                with server._lock:
                    server.log.served += 1
                max_tokens = int(body.get("max_tokens") or 10_000)
                tokens_out = min(max(1, len(text) // 4), max_tokens)
                self._send(
                    200,
                    {
                        "id": "chatcmpl-loopback",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": finish,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": sum(len(m.get("content", "")) for m in body.get("messages", [])) // 4,
                            "completion_tokens": tokens_out,
                            "total_tokens": 0,
                        },
                    },
                )

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                self._raw(status, json.dumps(payload).encode(), headers=headers)

            def _raw(self, status: int, data: bytes, declared: int | None = None, headers: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(declared or len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    self.close_connection = True
                if declared:
                    self.close_connection = True  # the body ends early: a truncated response

        return Handler
