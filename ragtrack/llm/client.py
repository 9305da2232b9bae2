"""The LLM client: one place for cache, retries, concurrency, repair and accounting."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Accounting, Price, Usage
from ragtrack.llm.base import (
    ChatBackend,
    ChatParams,
    Completion,
    Message,
    ParseError,
    PermanentError,
    Step,
    StepResult,
    TransientError,
)
from ragtrack.llm.cache import CompletionCache, cache_key
from ragtrack.llm.concurrency import AdaptiveLimiter
from ragtrack.llm.memory import EndpointMemory, backend_limiter
from ragtrack.secrets import redact

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")
T = TypeVar("T")

REPAIR_INSTRUCTION = (
    "Your previous reply could not be read ({error}). Reply again with only the "
    "requested output, nothing before or after it."
)


class CircuitOpenError(RagtrackError):
    """Too many consecutive failures: the endpoint is down; stop the run cleanly."""


class EndpointRefusedError(CircuitOpenError):
    """The endpoint refused the configuration (the key, the model, the URL): fix it, then resume."""


@dataclass(frozen=True)
class RetryPolicy:
    # Six attempts, 15-31 s of backoff between the first and the last: a server restarting (a vLLM
    # reloading its model, a proxy failing over) is ridden out instead of leaving holes in the run.
    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    # After this many steps in a row fail, stop instead of burning through the rest.
    max_consecutive_failures: int = 8
    sleep: Callable[[float], None] = time.sleep  # injectable: tests wait on a fake clock

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter (half of it fixed, so the retries of one call span a
        known window; full jitter could spend all of them within a second); a server's Retry-After
        wins when longer."""
        cap = min(self.max_delay_s, self.base_delay_s * 2**attempt)
        return max(random.uniform(cap / 2, cap), min(retry_after or 0.0, self.max_delay_s))


class Circuit:
    """Counts calls that failed after every retry, in a row; past ``limit`` the endpoint is down.

    Shared by judge calls and agent calls: each failure is recorded on its item (the one that
    reaches the limit too), and the next call stops the run cleanly (:class:`CircuitOpenError`).
    Requests that got no reply within the timeout are counted one by one, retries included: a
    hung server would otherwise cost ``limit`` calls × their attempts × the timeout (80 minutes
    at 120 s) before the run stopped.
    """

    def __init__(self, limit: int, what: str, where: str):
        self.limit, self.what, self.where = limit, what, where
        self._in_a_row = 0
        self._timeouts = 0  # requests in a row without a reply, retries included
        self._unreadable = 0  # replies in a row that could not be read, repair round included
        self._last = ""
        self._lock = threading.Lock()

    def check(self) -> None:
        """Before a call or a retry: raises :class:`CircuitOpenError` once ``limit`` calls in a row
        failed, or ``limit`` requests in a row got no reply."""
        with self._lock:
            n, timeouts, unreadable, last = self._in_a_row, self._timeouts, self._unreadable, self._last
        if n >= self.limit:
            raise CircuitOpenError(f"{n} {self.what} failed in a row against {self.where}; last: {last}")
        if timeouts >= self.limit:
            raise CircuitOpenError(f"{timeouts} requests in a row got no reply from {self.where}; last: {last}")
        if unreadable >= self.limit:
            raise CircuitOpenError(
                f"{unreadable} replies in a row from {self.where} could not be read; last: {last} "
                "(does the model follow the prompt's format? a larger max_tokens?)"
            )

    def success(self) -> None:
        with self._lock:
            self._in_a_row = self._timeouts = 0

    def timed_out(self, error: str) -> None:
        with self._lock:
            self._timeouts += 1
            self._last = error

    def read(self, error: str | None) -> None:
        """A reply was read (``error`` None) or could not be, even after the repair round: a model
        whose every reply is unreadable costs a judge error per call, so ``limit`` in a row stop the run."""
        with self._lock:
            self._unreadable = 0 if error is None else self._unreadable + 1
            self._last = error or self._last

    def failure(self, error: str) -> None:
        """Count one failure (the next :meth:`check` stops the run once ``limit`` are in a row)."""
        with self._lock:
            self._in_a_row += 1
            self._last = error

    def refused(self, error: str, status: int = 401) -> None:
        """The endpoint refused the key (401/403) or knows no such model or path (404): no later call
        can succeed, so stop now, not after ``limit``."""
        if status == 404:
            raise EndpointRefusedError(
                f"{self.where} answered 404 (no such model, or base_url is not the API's): {error}"
            )
        raise EndpointRefusedError(f"{self.where} refused the API key: {error}")


def call_with_retries(
    call: Callable[[], T],
    retry: RetryPolicy,
    limiter: AdaptiveLimiter,
    usage: Usage,
    step: str,
    circuit: Circuit | None = None,
) -> tuple[T, float]:
    """``call()`` inside a limiter slot, retried on :class:`TransientError` with backoff (a server's
    Retry-After honoured, overload signals shrinking the limit); returns its value and latency.

    Retries are counted in ``usage``. Raises :class:`PermanentError` at once and
    :class:`TransientError` after the last attempt; ``circuit`` counts timed-out attempts and
    stops the retries (:class:`CircuitOpenError`) once the endpoint is judged down.
    """
    last: Exception | None = None
    for attempt in range(retry.max_attempts):
        if attempt:
            usage.retries += 1
        if circuit is not None:
            circuit.check()
        try:
            with limiter.slot() as sent:
                started = time.monotonic()
                value = call()
                latency = time.monotonic() - started
        except TransientError as e:
            last = e
            if e.overload:
                limiter.on_overload()
            if e.timed_out and circuit is not None:
                circuit.timed_out(str(e))
            if attempt + 1 < retry.max_attempts:
                retry.sleep(retry.delay(attempt, e.retry_after))
            continue
        limiter.on_success(latency, step, sent)
        return value, latency
    raise TransientError(f"gave up after {retry.max_attempts} attempts: {last}")


class LLM:
    """Runs :class:`Step` objects against a backend, or offline when there is none."""

    def __init__(
        self,
        backend: ChatBackend | None = None,
        *,
        cache_dir: str | Path | None = None,
        read_cache: bool = True,
        retry: RetryPolicy | None = None,
        prices: dict[str, Price] | None = None,
        limiter: AdaptiveLimiter | None = None,
    ):
        """``cache_dir`` keeps every reply a step could read; ``read_cache=False`` asks again
        instead of reading them (``--no-cache``) and still keeps the new ones."""
        self.backend = backend
        self.cache = CompletionCache(cache_dir) if cache_dir and backend else None
        self.read_cache = read_cache
        self.retry = retry or RetryPolicy()
        self.price = (prices or {}).get(self.model_name, Price())
        self.accounting = Accounting()
        self.limiter = limiter or (backend_limiter(backend, EndpointMemory(None)) if backend else AdaptiveLimiter(1))
        self.circuit = Circuit(self.retry.max_consecutive_failures, "LLM steps", self.identity)

    @property
    def identity(self) -> str:
        return self.backend.identity if self.backend else "offline"

    @property
    def is_offline(self) -> bool:
        return self.backend is None

    @property
    def workers(self) -> int:
        """Threads worth running over this LLM: remote endpoints get as many as the
        limiter may ever allow (it decides what is really in flight); local models and
        offline steps are CPU-bound in this process, where threads would only contend."""
        if self.backend is None or self.backend.max_concurrency <= 1:
            return 1
        return self.limiter.maximum

    @property
    def endpoint_limit(self) -> int | None:
        """The most requests this LLM may have in flight at its endpoint: a limit every process calling
        the endpoint shares (the Spark engine divides it among its tasks). None offline, or for a model
        that computes in this process (``in_process``)."""
        if self.backend is None or getattr(self.backend, "in_process", False):
            return None
        return self.limiter.maximum

    @property
    def model_name(self) -> str:
        """The model part of the identity, for price lookup."""
        return self.identity.split(":", 1)[-1].split("@", 1)[0]

    def run(self, step: Step[I, O], inp: I) -> StepResult[O]:
        """Do ``step`` on ``inp``. Never raises for one bad reply: returns an error result.

        Raises :class:`CircuitOpenError` only when the endpoint has failed many
        steps in a row, so the caller can stop and keep what it finished.
        """
        usage = Usage()
        try:
            result = self._run(step, inp, usage)
        except CircuitOpenError:
            self.accounting.add(step.name, usage)
            raise
        self.accounting.add(step.name, usage)
        return result

    def _run(self, step: Step[I, O], inp: I, usage: Usage) -> StepResult[O]:
        if self.backend is None:
            usage.offline += 1
            return StepResult(value=step.offline(inp), usage=usage)
        self.circuit.check()

        params = ChatParams(step.temperature, step.max_tokens, json_schema=step.json_schema, seed=step.seed)
        messages = step.messages(inp)
        try:
            first, first_cached = self._complete(step.name, messages, params, usage)
        except (TransientError, PermanentError) as e:
            if isinstance(e, PermanentError) and e.refused:
                usage.failed += 1
                self.circuit.refused(redact(str(e)), e.status)
            return self._failed(usage, f"call failed: {e}", endpoint_down=True)
        try:
            value = self._parse(step, messages, params, first, first_cached)
            self.circuit.read(None)
            return StepResult(value, raw=first.text, usage=usage)
        except ParseError as e:
            error = str(e)

        # One repair round: show the model its reply and what was wrong with it.
        repair = [
            *messages,
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": REPAIR_INSTRUCTION.format(error=error)},
        ]
        try:
            second, _ = self._complete(step.name, repair, params, usage)
        except (TransientError, PermanentError) as e:
            return self._failed(usage, f"parse: {error}; repair call failed: {e}", first.text, endpoint_down=True)
        try:
            # Kept under the original request, where the next run looks first: a warm re-run of a step
            # that needed its repair makes no call (under the repair's key, it paid the failed one again).
            value = self._parse(step, messages, params, second, cached=False)
            self.circuit.read(None)
            return StepResult(value, raw=second.text, usage=usage)
        except ParseError as e:
            self.circuit.read(redact(f"parse: {e}"))
            return self._failed(usage, f"parse: {e}", f"{first.text}\n--- repair ---\n{second.text}")

    def _parse(
        self, step: Step[I, O], messages: list[Message], params: ChatParams, completion: Completion, cached: bool
    ) -> O:
        """``step.parse`` of a reply, which is untrusted text: whatever a parser meets that it did not
        foresee is a :class:`ParseError` of this reply, never the run's crash. Only a reply that
        parses is cached, under the request ``messages``: one that did not is asked again next time."""
        try:
            value = step.parse(completion.text)
        except ParseError as e:
            if completion.truncated and "max_tokens" not in str(e):
                raise ParseError(f"{e} (the reply was cut at max_tokens = {params.max_tokens})") from None
            raise
        except Exception as e:  # any exception: see the docstring
            raise ParseError(f"unreadable reply ({type(e).__name__}: {e})") from e
        if self.cache and not cached:
            self.cache.put(cache_key(self.identity, messages, params), completion)
        return value

    def map(self, step: Step[I, O], inputs: list[I]) -> list[StepResult[O]]:
        """Run ``step`` over many inputs; results in input order.

        Threads only wait on the network: the adaptive limiter decides how many
        requests are really in flight. Offline steps run in this thread.
        """
        if self.backend is None:
            return [self.run(step, inp) for inp in inputs]
        with ThreadPoolExecutor(max_workers=self.limiter.maximum) as pool:
            return list(pool.map(lambda inp: self.run(step, inp), inputs))

    def _failed(self, usage: Usage, error: str, raw: str | None = None, endpoint_down: bool = False) -> StepResult:
        """Record a failed step. Only calls that failed after all retries count toward
        stopping the run; an unreadable reply is the model's problem, recorded per item."""
        error, raw = redact(error), redact(raw) if raw else raw
        usage.failed += 1
        if endpoint_down:
            self.circuit.failure(error)
        return StepResult(value=None, error=error, raw=raw, usage=usage)

    def _complete(
        self, step: str, messages: list[Message], params: ChatParams, usage: Usage
    ) -> tuple[Completion, bool]:
        """One completion and whether it came from the cache (else from the backend, with retries);
        counted in ``usage``."""
        assert self.backend is not None
        if self.cache and self.read_cache:
            hit = self.cache.get(cache_key(self.identity, messages, params))
            if hit is not None:
                usage.cached += 1
                self.circuit.success()  # as for an agent's cached reply: the failures around it are not in a row
                return hit, True
        backend = self.backend
        completion, latency = call_with_retries(
            lambda: backend.chat(messages, params), self.retry, self.limiter, usage, step, self.circuit
        )
        completion = replace(completion, text=redact(completion.text))
        self.circuit.success()
        usage.calls += 1
        usage.tokens_in += completion.tokens_in
        usage.tokens_out += completion.tokens_out
        usage.truncated += int(completion.truncated)
        usage.cost_usd += self.price.cost(completion.tokens_in, completion.tokens_out)
        usage.latencies.append(latency)
        return completion, False
