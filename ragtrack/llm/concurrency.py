"""How many requests to keep in flight: additive increase, multiplicative decrease.

A fixed worker count is wrong for almost every endpoint: a hosted API can take
dozens of requests at once, a local llama.cpp server serves one at a time and
only queues the rest (its latency grows with every extra request, until
clients time out while the server keeps computing abandoned work).

The limiter starts low (4 slots) and learns from latency, per step (replies of
one step have similar lengths). It keeps the fastest latency seen and a smoothed
recent one. While both this reply and the recent latency stay near the fastest
seen before it (a step's own fastest counts only once one of its replies came
back near the other steps' fastest; until then theirs is the yardstick, and the
very first reply only sets it), requests are not waiting inside the
server, so it grows: by one slot per reply at first (slow start: the limit
doubles every round trip, so a large endpoint is reached in a few round trips),
then — after the first sign of congestion — by about one slot per round trip
(additive increase). Once the recent latency reaches ``queue_factor`` times
the fastest, requests are queueing — more concurrency buys nothing — so it
halves (multiplicative decrease); it also halves on an overload signal (429,
503, timeout). This is TCP's congestion
control, applied to an LLM endpoint.

Given ``on_change``, it reports each new whole limit, so the next run can start
where this one ended (:mod:`ragtrack.llm.memory`) instead of climbing again.

Known weakness: the fastest reply stands for "unqueued", so a step whose reply
times vary by more than ``queue_factor`` between its fastest and its mean reads
as queueing, and the limit falls to 1-2 (README, LLM layer). ``minimum`` is the
user's way around it: a floor the endpoint is known to serve.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# First contact: TCP's initial window went up to four segments (RFC 3390) for the same reason — enough
# to skip a round trip of climbing, few enough that a one-slot server only queues three.
INITIAL_LIMIT = 4


class AdaptiveLimiter:
    def __init__(
        self,
        maximum: int,
        initial: int = INITIAL_LIMIT,
        queue_factor: float = 1.8,
        grow_below: float = 1.4,
        *,
        congested: bool = False,
        minimum: int = 1,
        on_change: Callable[[int, bool], None] | None = None,
    ):
        """``initial`` and ``congested`` resume a limit learned earlier (``congested``: no slow start);
        ``minimum`` is a floor the user knows the endpoint serves (``minimum == maximum``: a fixed
        pool); ``on_change(limit, congested)`` hears of every change of the whole limit."""
        self.maximum = max(1, maximum)
        self.minimum = min(self.maximum, max(1, minimum))
        self.limit = float(min(self.maximum, max(self.minimum, initial)))
        self.queue_factor = queue_factor
        self.grow_below = grow_below
        self._recent: dict[str, float] = {}  # per step: exponentially smoothed latency
        self.in_flight = 0
        self.peak_in_flight = 0
        self._best_latency: dict[str, float] = {}  # per step: replies of one step have similar lengths
        self._unqueued: set[str] = set()  # steps whose fastest was seen unqueued: a baseline of their own
        self.slow_start = not congested  # until the first sign of congestion
        self._on_change = on_change
        self._reported = (int(self.limit), congested)
        self._report_lock = threading.Lock()  # reports leave in order, each with the latest state
        self._cond = threading.Condition()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one request slot; blocks while ``limit`` requests are in flight."""
        with self._cond:
            while self.in_flight >= int(self.limit):
                self._cond.wait()
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._cond:
                self.in_flight -= 1
                self._cond.notify_all()

    def on_success(self, latency_s: float, step: str = "") -> None:
        with self._cond:
            baseline = self._baseline(step)
            if baseline is None or latency_s <= self.grow_below * baseline:
                self._unqueued.add(step)
            best = min(self._best_latency.get(step, latency_s), latency_s)
            recent = 0.7 * self._recent.get(step, latency_s) + 0.3 * latency_s
            self._best_latency[step], self._recent[step] = best, recent
            if recent >= self.queue_factor * best:
                self._decrease()
                self._recent[step] = best * self.grow_below  # give the smaller limit a fresh start
            elif baseline is not None and max(recent, latency_s) <= self.grow_below * min(baseline, best):
                # Slow start: +1 per success (×2 per round trip); then +1 per ``limit`` successes (+1 per round trip).
                self.limit = min(self.maximum, self.limit + (1.0 if self.slow_start else 1.0 / self.limit))
            self._cond.notify_all()
        self._report()

    def _baseline(self, step: str) -> float | None:
        """The latency an unqueued reply of ``step`` should beat, from replies before this one: the
        step's own fastest once one of its replies came back near the fastest of the other steps,
        until then that fastest. A step's first reply is its own best by definition, so it proves
        nothing: at a one-slot server it may have waited behind three others, and replies that keep
        waiting as long would look unqueued against it and grow the limit while the queue stays.
        (A step that is slower by nature never gets a baseline of its own; the others grow the limit.)"""
        if step in self._unqueued:
            return self._best_latency[step]
        return min((b for s, b in self._best_latency.items() if s in self._unqueued), default=None)

    def on_overload(self) -> None:
        with self._cond:
            self._decrease()
        self._report()

    def _report(self) -> None:
        """Outside the limit's lock (the listener may write a file), one report at a time, each
        reading the state afresh: a report computed before another thread's change can never
        land after that thread's and leave the listener with a stale limit."""
        if self._on_change is None:
            return
        with self._report_lock:
            with self._cond:
                now = (int(self.limit), not self.slow_start)
            if now[0] != self._reported[0]:
                self._reported = now
                self._on_change(*now)

    def _decrease(self) -> None:
        self.slow_start = False
        self.limit = max(float(self.minimum), self.limit / 2)
