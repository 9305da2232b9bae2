"""One HTTP client for every agent endpoint, with what judge calls have.

A timeout on every call; retries with exponential backoff and jitter on 429,
5xx, timeouts and dropped connections, honouring ``Retry-After``; an adaptive
concurrency limit (a self-hosted Dify on a laptop is easily overloaded, and one
agent call is a whole chain of model calls: it starts at 2 in flight, not the
judges' 4, and halves on every overload signal). Retry policy,
retry loop and limiter are the LLM client's own. Platforms report errors
their own way (RAGFlow: HTTP 200 with a non-zero ``code``; Dify Cloud: 403
for its rate limit), so each kind passes a ``check`` that classifies a reply.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import PermanentError, TransientError
from ragtrack.llm.client import Circuit, RetryPolicy, call_with_retries
from ragtrack.llm.concurrency import AdaptiveLimiter
from ragtrack.llm.memory import EndpointMemory
from ragtrack.production.fields import json_int
from ragtrack.secrets import redact, without_credentials

AGENT_FIRST_CONTACT = 2  # in flight against a new agent endpoint (see the module docstring)

#: A platform's reading of a reply: an error to raise (transient: retried), or None when it is fine.
Check = Callable[[int, Any], Exception | None]


class Rejected(PermanentError):
    """The endpoint refused the request: retrying the same request cannot help."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"HTTP {status}" + (f" {code}" if code else "") + f": {message}")
        self.status, self.code, self.message = status, code, message


class EndpointError(Exception):
    """A call that failed after every retry, or that the endpoint refused (secrets redacted)."""

    def __init__(self, message: str, status: int = 0, code: str = ""):
        super().__init__(redact(message))
        self.status, self.code = status, code


def error_message(body: Any) -> tuple[str, str]:
    """(code, message) of an error body: Dify ``{code, message, status}``, RAGFlow ``{code, message}``,
    OpenAI ``{"error": {...}}``, or plain text."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        return str(inner.get("code") or inner.get("type") or ""), str(
            inner.get("message") or inner.get("error") or body
        )
    return "", str(body)[:300]


def standard_check(status: int, body: Any) -> Exception | None:
    """HTTP semantics: 429 and 5xx are worth retrying (429 and 503 mean "slow down"); other 4xx are not."""
    if status < 400:
        return None
    code, message = error_message(body)
    if status == 429 or status >= 500:
        return TransientError(f"HTTP {status}: {message}", overload=status in (429, 503))
    return Rejected(status, code, message)


def retry_after(headers: httpx.Headers) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), when the server sent one."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class _NotJson(str):
    """A reply body that is not JSON (a proxy's HTML error page, say)."""


class Endpoint:
    """Requests to one base URL, each retried and throttled; JSON (or server-sent events) back."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout_s: float,
        max_concurrency: int,
        min_concurrency: int = 1,
        check: Check = standard_check,
        retry: RetryPolicy | None = None,
        memory: EndpointMemory | None = None,
        circuit: Circuit | None = None,
        deadline_s: float | None = None,
    ):
        """``min_concurrency``: a floor the user knows the endpoint serves; ``memory``: where the
        concurrency this endpoint sustains is remembered between runs; ``circuit``: the agent's,
        which stops the run when requests keep getting no reply (see :class:`Circuit`);
        ``deadline_s``: the most one whole reply may take (httpx's ``timeout_s`` bounds each read,
        so a server sending a byte a second never trips it)."""
        self.circuit = circuit
        self.deadline_s = deadline_s
        #: Told when a server asks, with ``Retry-After``, for a longer wait than the retry policy's cap.
        self.notice: Callable[[str], None] = lambda line: None
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.check = check
        self.retry = retry or RetryPolicy()
        self.limiter = (
            memory.limiter(
                f"agent@{without_credentials(self.base_url)}", max_concurrency, AGENT_FIRST_CONTACT, min_concurrency
            )
            if memory
            else AdaptiveLimiter(max_concurrency, AGENT_FIRST_CONTACT, minimum=min_concurrency)
        )
        limits = httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency)
        self.client = httpx.Client(headers={"User-Agent": "ragtrack", **headers}, timeout=timeout_s, limits=limits)

    def request(
        self,
        method: str,
        path: str,
        *,
        usage: Usage,
        step: str,
        json_body: Any = None,
        params: dict | None = None,
        events: bool = False,
    ) -> Any:
        """The reply's JSON (``events``: the list of server-sent event payloads); counted in ``usage``.

        Raises :class:`EndpointError` when the call failed after every retry or was refused.
        """
        try:
            body, latency = call_with_retries(
                lambda: self._send(method, path, json_body, params, events),
                self.retry,
                self.limiter,
                usage,
                step,
                self.circuit,
            )
        except Rejected as e:
            raise EndpointError(str(e), e.status, e.code) from None
        except (TransientError, PermanentError) as e:
            raise EndpointError(str(e)) from None
        usage.calls += 1
        usage.latencies.append(latency)
        return body

    def _send(self, method: str, path: str, json_body: Any, params: dict | None, events: bool) -> Any:
        url = self.base_url + path
        try:
            if events:
                with self.client.stream(method, url, json=json_body, params=params) as r:
                    status, headers = r.status_code, r.headers
                    body = _events(r.iter_lines()) if status < 400 else _parse(r.read())
            elif self.deadline_s is None:
                r = self.client.request(method, url, json=json_body, params=params)
                status, headers, body = r.status_code, r.headers, _parse(r.content)
            else:
                deadline = time.monotonic() + self.deadline_s
                with self.client.stream(method, url, json=json_body, params=params) as r:
                    status, headers, body = r.status_code, r.headers, _parse(whole_body(r, deadline, self.deadline_s))
        except httpx.TimeoutException:
            raise TransientError(f"no reply within {self.timeout_s:g}s", overload=True, timed_out=True) from None
        except (httpx.TransportError, json.JSONDecodeError) as e:  # dropped connection, torn event stream
            raise TransientError(f"{type(e).__name__}: {e}") from None
        problem = self.check(status, body) or standard_check(status, body)
        if isinstance(problem, TransientError) and problem.retry_after is None:
            problem.retry_after = retry_after(headers)
            if problem.retry_after is not None and problem.retry_after > self.retry.max_delay_s:
                self.notice(
                    f"{without_credentials(self.base_url)}{path} asked to wait {problem.retry_after:.0f} s "
                    f"(Retry-After); waiting {self.retry.max_delay_s:g} s at most before asking again"
                )
        if problem is not None:
            raise problem
        if isinstance(body, _NotJson):  # a web page where an API should be: asking again will not help
            raise PermanentError(f"HTTP {status} reply is not JSON (is the URL the API's?): {body[:120]!r}")
        return body


def bearer_endpoint(
    base_url: str,
    key: str,
    *,
    timeout_s: float,
    max_concurrency: int,
    check: Check,
    min_concurrency: int = 1,
    memory: EndpointMemory | None = None,
    circuit: Circuit | None = None,
    retry: RetryPolicy | None = None,
    deadline_s: float | None = None,
) -> Endpoint:
    """An endpoint authenticated the way Dify and RAGFlow both do: ``Authorization: Bearer <key>``."""
    return Endpoint(
        base_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout_s=timeout_s,
        max_concurrency=max_concurrency,
        min_concurrency=min_concurrency,
        check=check,
        memory=memory,
        circuit=circuit,
        retry=retry,
        deadline_s=deadline_s,
    )


def whole_body(response: httpx.Response, deadline: float, limit_s: float) -> bytes:
    """The whole body, or :class:`TransientError` once ``deadline`` (monotonic) passes while it drips in."""
    chunks = []
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise TransientError(f"no whole reply within {limit_s:g}s (it kept trickling in)", timed_out=True)
    return b"".join(chunks)


def _parse(content: bytes) -> Any:
    # An integer too long for Python (json refuses more than 4,300 digits: a 5,000-digit message_id) is
    # kept as its digits, for the field's own check to refuse, not the whole page.
    try:
        return json.loads(content, parse_int=json_int)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _NotJson(content.decode("utf-8", "replace"))


def _events(lines) -> list[Any]:
    """Server-sent events: the JSON of every ``data:`` line (``data: [DONE]`` and pings skipped)."""
    out = []
    for line in lines:
        if line.startswith("data:") and (data := line[5:].strip()) and data != "[DONE]":
            out.append(json.loads(data))
    return out
