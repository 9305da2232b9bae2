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
the fastest, requests may be queueing — more concurrency buys nothing — so it
halves (multiplicative decrease); it also halves on an overload signal (429,
503, timeout). This is TCP's congestion control, applied to an LLM endpoint.

A slow streak is not yet proof of a queue: reply times vary with reply length,
and a step's mean can sit twice above its fastest with nothing waiting. What
queueing does and variance does not is grow with our own requests in flight. So
every reply is filed under its *level* — how many of our requests were in
flight when it was sent — and before halving, the limiter compares, step by
step, the median latency of replies sent near the current level with that of
the step's replies sent at half of it or lower. Only when these ratios (their
median over the steps) reach ``LEVEL_FACTOR`` is it a queue; otherwise the lower
levels' median becomes the step's *typical* unqueued latency, which later alarms
and growth are measured against instead of the fastest. With no replies at half
the level yet (first contact) it halves as before: a one-slot server's first
burst must be met at once. A queue halves the limit once per round trip:
replies sent before a decrease still show the queue it answered (TCP's fast
recovery). ``benchmarks/limiter_benchmark.py`` shows the design against its
predecessor over many simulated endpoints.

Given ``on_change``, it reports each new whole limit, so the next run can start
where this one ended (:mod:`ragtrack.llm.memory`) instead of climbing again.
``minimum`` is a floor the user knows the endpoint serves.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import median

# First contact: TCP's initial window went up to four segments (RFC 3390) for the same reason — enough
# to skip a round trip of climbing, few enough that a one-slot server only queues three.
INITIAL_LIMIT = 4
# Replies sent near the current level this much slower (median) than those sent at half of it or lower:
# a queue. Doubling the requests in flight at a saturated server doubles the wait; variance does not move it.
LEVEL_FACTOR = 1.5
REFERENCE_REPLIES = 3  # the lowest levels' replies taken until there are this many: one reply is noise
LEVEL_WINDOW = 16  # the latest replies kept per step and level: the endpoint's present, not its history


@dataclass(frozen=True)
class Sent:
    """Where a request stood among ours: ``level``, how many were in flight with it (itself
    included), and ``number``, its place in sending order."""

    level: int
    number: int


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
        self._by_level: dict[str, dict[int, deque[float]]] = {}  # per step and level: latest latencies
        self._typical: dict[str, float] = {}  # per step: unqueued latency, once variance was told from a queue
        self._sent = 0  # requests sent so far
        self._decreased_after = 0  # requests sent before the last decrease for queueing
        self.slow_start = not congested  # until the first sign of congestion
        self._on_change = on_change
        self._reported = (int(self.limit), congested)
        self._report_lock = threading.Lock()  # reports leave in order, each with the latest state
        self._cond = threading.Condition()

    def try_acquire(self) -> Sent | None:
        """Take a request slot if one is free (None if not); :meth:`on_success` wants the ticket back."""
        with self._cond:
            if self.in_flight >= int(self.limit):
                return None
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self._sent += 1
            return Sent(self.in_flight, self._sent)

    def release(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    @contextmanager
    def slot(self) -> Iterator[Sent]:
        """Hold one request slot, blocking while ``limit`` requests are in flight; yields the
        ticket :meth:`on_success` wants back."""
        with self._cond:
            while (sent := self.try_acquire()) is None:
                self._cond.wait()
        try:
            yield sent
        finally:
            self.release()

    def on_success(self, latency_s: float, step: str = "", sent: Sent | None = None) -> None:
        """Learn from one reply of ``step`` that took ``latency_s``; without ``sent`` (the ticket
        of :meth:`slot`) it counts as sent alone, after every other."""
        with self._cond:
            level = sent.level if sent else 1
            levels = self._by_level.setdefault(step, {})
            levels.setdefault(level, deque(maxlen=LEVEL_WINDOW)).append(latency_s)
            baseline = self._baseline(step)
            if baseline is None or latency_s <= self.grow_below * baseline:
                self._unqueued.add(step)
            best = min(self._best_latency.get(step, latency_s), latency_s)
            recent = 0.7 * self._recent.get(step, latency_s) + 0.3 * latency_s
            self._best_latency[step], self._recent[step] = best, recent
            typical = self._typical.get(step)
            yardstick = typical or best
            if recent >= self.queue_factor * yardstick:
                unqueued = self._typical_unless_queued(step, level)
                if unqueued is None:
                    # Once per round trip, as TCP's fast recovery: replies sent before the last
                    # decrease show the queue that decrease already answered.
                    if sent is None or sent.number > self._decreased_after:
                        self._decrease()
                        self._decreased_after = self._sent
                    self._recent[step] = yardstick * self.grow_below  # give the smaller limit a fresh start
                else:
                    self._typical[step] = unqueued
            elif typical is not None:
                if recent <= self.grow_below * typical:
                    self._grow()
            elif baseline is not None and max(recent, latency_s) <= self.grow_below * min(baseline, best):
                self._grow()
            self._cond.notify_all()
        self._report()

    def _grow(self) -> None:
        # Slow start: +1 per success (×2 per round trip); then +1 per ``limit`` successes (+1 per round trip).
        self.limit = min(self.maximum, self.limit + (1.0 if self.slow_start else 1.0 / self.limit))

    def _typical_unless_queued(self, step: str, level: int) -> float | None:
        """None if the replies say queue, else ``step``'s typical unqueued latency.

        Only comparisons within a step count: steps differ in reply length, and at first contact
        each step's replies come from different levels. Per step: the median latency of replies
        sent near ``level`` (above half of it) over that of its replies at the lowest levels, at
        most half of it. The median of these ratios over the steps that have both is the
        verdict: a queue at :data:`LEVEL_FACTOR` or more, or when no step has both yet."""
        ratios, typical = [], None
        for name, by_level in self._by_level.items():
            reference: list[float] = []
            for k in sorted(k for k in by_level if k <= level / 2):
                if len(reference) >= REFERENCE_REPLIES:
                    break
                reference.extend(by_level[k])
            near = [x for k, xs in by_level.items() if level / 2 < k <= level for x in xs]
            if reference and near:
                ratios.append(median(near) / median(reference))
            if name == step and reference:
                typical = median(reference)
        if not ratios or median(ratios) >= LEVEL_FACTOR:
            return None
        return typical or self._best_latency[step]  # a step with no low replies of its own keeps its fastest

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
