"""The HTTP plumbing of the loopback platform servers: routes, request log, injected faults.

Binds 127.0.0.1 only. A subclass lists its routes (method, path pattern,
method name) and speaks its platform's shapes; this class records every
request and reply (tests compute expected metrics from what was really
returned) and applies injected faults, one per request: ``429`` (with
``Retry-After``), ``500``, ``slow`` and ``drop`` (the connection closes with
no reply); platform-specific kinds are the subclass's.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Fault:
    """One injected misbehaviour, consumed by the next request that can fail."""

    kind: str  # "429" | "500" | "slow" | "drop" | a platform's own kind
    seconds: float = 0.0  # Retry-After for 429, delay for "slow"


def add_fault_option(parser: argparse.ArgumentParser, kinds: tuple[str, ...]) -> None:
    """``--fault KIND[:SECONDS]``, repeatable: misbehaviours the next requests meet, in order (to rehearse
    what an eval does when the platform fails, from the command line as the tests do with ``inject``)."""
    parser.add_argument(
        "--fault",
        dest="faults",
        action="append",
        default=[],
        type=lambda text: _fault(text, kinds),
        metavar="KIND[:SECONDS]",
        help=(
            f"one of {', '.join(kinds)}; SECONDS: Retry-After of a 429, the delay of slow (repeatable: the next "
            "requests meet them in order, one each)"
        ),
    )


def _fault(text: str, kinds: tuple[str, ...]) -> Fault:
    kind, _, seconds = text.partition(":")
    if kind not in kinds:
        raise argparse.ArgumentTypeError(f"unknown fault {kind!r}; expected one of {', '.join(kinds)}")
    try:
        return Fault(kind, float(seconds or 0))
    except ValueError:
        raise argparse.ArgumentTypeError(f"SECONDS must be a number, got {seconds!r}") from None


#: What every loopback server can do wrong; a platform adds its own kinds.
FAULTS = ("429", "500", "slow", "drop")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any
    handler: str = ""  # the route handler that answered it


@dataclass
class Response:
    status: int
    body: Any = None  # JSON-able, or bytes the route serialised itself
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Any] | None = None  # a server-sent event stream instead of a JSON body


#: A reply that is no reply: the connection closes (an injected ``drop``).
DROP = Response(0)


@dataclass
class Exchange:
    request: Request
    response: Response


class LoopbackServer:
    """Subclass: set ``ROUTES`` = [(method, regex with named groups, handler name)] and ``error()``."""

    ROUTES: list[tuple[str, str, str]] = []
    PREFIX = ""

    def __init__(self, port: int = 0):
        self.faults: deque[Fault] = deque()
        self.exchanges: list[Exchange] = []
        self.in_flight = self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._routes = [(m, re.compile(p), name) for m, p, name in self.ROUTES]
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.PREFIX}"

    def inject(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def __enter__(self) -> LoopbackServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def serve_forever(self, banner: str = "") -> None:
        """Serve until Ctrl-C; ``banner`` (what runs where) is printed first, for whoever started it."""
        if banner:
            print(f"{banner}; Ctrl-C stops it", flush=True)
        try:
            self._httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._httpd.server_close()

    def replies(self, handler: str) -> list[Exchange]:
        """The exchanges answered by one route handler, in order (e.g. every chat reply)."""
        return [x for x in self.exchanges if x.request.handler == handler and x.response is not DROP]

    # ---------------------------------------------------------------- for subclasses
    def error(self, status: int, code: str, message: str) -> Response:
        raise NotImplementedError

    def not_found(self, request: Request) -> Response:
        return self.error(404, "not_found", f"Not Found: {request.path}")

    def fault(self) -> Response | Fault | None:
        """The next injected fault: a ready reply for the generic kinds, the Fault itself for the
        subclass to act on, or None."""
        with self._lock:
            fault = self.faults.popleft() if self.faults else None
        if fault is None:
            return None
        if fault.kind == "slow":
            time.sleep(fault.seconds)
            return None
        if fault.kind == "429":
            reply = self.error(429, "rate_limit_error", "Too many requests, slow down.")
            reply.headers["Retry-After"] = f"{fault.seconds:g}"
            return reply
        if fault.kind == "500":
            return self.error(500, "internal_server_error", "Internal Server Error")
        if fault.kind == "drop":
            return DROP
        return fault

    # ---------------------------------------------------------------- plumbing
    def _dispatch(self, request: Request) -> Response:
        for method, pattern, name in self._routes:
            if method == request.method and (m := pattern.fullmatch(request.path)):
                request.handler = name
                return getattr(self, name)(request, **m.groupdict())
        return self.not_found(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes; with Nagle's algorithm on, the body waits for the
            # client's delayed ACK of the headers (40 ms on Linux) on every reply. Real servers
            # (uvicorn under vLLM, Go's net/http under Ollama) set TCP_NODELAY, and so does this one.
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve()

            def do_POST(self) -> None:  # noqa: N802
                self._serve()

            def do_PUT(self) -> None:  # noqa: N802
                self._serve()

            def _serve(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(self.command, url.path, query, headers, body)
                with server._lock:
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                try:
                    response = server._dispatch(request)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                with server._lock:
                    server.exchanges.append(Exchange(request, response))
                if response is DROP:
                    self.close_connection = True
                    return
                self._send(response)

            def _send(self, response: Response) -> None:
                if response.events is not None:
                    data = "".join(f"data: {json.dumps(e)}\n\n" for e in response.events).encode()
                    data = b"event: ping\n\n" + data
                    kind = "text/event-stream"
                elif isinstance(response.body, bytes):  # written by the route itself, sent as it is
                    data, kind = response.body, "application/json"
                else:
                    data, kind = json.dumps(response.body, ensure_ascii=False).encode(), "application/json"
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in response.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        return Handler


def bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    value = request.headers.get("authorization", "")
    return value[7:].strip() if value.startswith("Bearer ") else None


def page_args(request: Request, size_name: str, default: int) -> tuple[int, int]:
    """``page`` (from 1) and the page size from the query, capped at 100 as both platforms do."""
    try:
        page = max(1, int(request.query.get("page", 1)))
        size = min(100, max(1, int(request.query.get(size_name, default))))
    except ValueError:
        page, size = 1, default
    return page, size
