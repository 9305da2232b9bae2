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
and a step's mean can sit twice above its fastest with nothing waiting. What a
queue does and variance does not is grow with our own requests in flight. So
every reply is filed under its *level*, how many of ours were in flight once it
was sent, and a slow streak is judged by comparing levels, step by step: replies
sent near the current level ``LEVEL_FACTOR`` times slower than those sent at half
of it or lower are a queue, and the limit halves; not that much slower, the
replies vary by nature, and the step's *typical* unqueued latency (its median)
replaces the fastest as the yardstick for later alarms and growth. With no
replies that low, replies at twice the level or more that are not that much
slower prove there is no queue either.

Where no comparison exists yet (first contact, a resumed limit) a queue is
presumed, and the limit halves: a one-slot server's first burst must be met at
once. Until a comparison settles it, any streak short of clearly unqueued halves
again, and if it then shows variance, the presumed decreases are undone (as
TCP's Eifel undoes a spurious timeout's). Two details keep the comparison
honest. Requests sent at once (a *burst*) reach the server in any order, since
threads race from slot to socket, so a burst's requests share its top level; a
burst sent from idle is not filed at all, because its replies waited anything
from nothing to the whole burst. And a queue halves the limit once per round
trip: replies sent before a decrease show the queue it already answered (TCP's
fast recovery). ``benchmarks/limiter_benchmark.py`` replays many endpoints,
this design beside an earlier commit's.

Given ``on_change``, it reports each new whole limit, so the next run can start
where this one ended (:mod:`ragtrack.llm.memory`) instead of climbing again.
``minimum`` is a floor the user knows the endpoint serves.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import median

# First contact: TCP's initial window went up to four segments (RFC 3390) for the same reason — enough
# to skip a round trip of climbing, few enough that a one-slot server only queues three.
INITIAL_LIMIT = 4
# Replies sent near the current level this much slower (median) than those sent at half of it or lower:
# a queue. Doubling the requests in flight at a saturated server doubles the wait; variance leaves it.
LEVEL_FACTOR = 1.5
REFERENCE_REPLIES = 3  # the lowest levels' replies taken until there are this many: one reply is noise
LEVEL_WINDOW = 16  # the latest replies kept per step and level: the endpoint's present, not its history
HISTORY = 4096  # bursts remembered to find each reply's level: far more than can be in flight at once
HORIZON = 512  # levels are compared over the replies to the latest this many sends: the endpoint as it is now


def bounds_problem(minimum: int, maximum: int) -> str | None:
    """What is wrong with a configured floor and ceiling, if anything: a floor above its ceiling is
    a slip, not a wish, so configuration names it instead of clamping it."""
    return f"min_concurrency ({minimum}) is above max_concurrency ({maximum})" if minimum > maximum else None


@dataclass(frozen=True)
class Sent:
    """Where a request stood among ours: ``level``, how many were in flight with it (itself
    included), ``number``, its place in sending order, and ``burst``, the sends it went out with
    (those with no reply or failure between them)."""

    level: int
    number: int
    burst: int = -1  # -1: a ticket made by hand (tests), not by try_acquire


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
        self._by_level: dict[str, dict[int, deque[tuple[int, float]]]] = {}  # per step, level: (sent, latency)
        self._typical: dict[str, float] = {}  # per step: unqueued latency, once variance was told from a queue
        self._sent = 0  # requests sent so far
        self._releases = 0  # replies and failures so far: sends between two of them form one burst
        self._bursts: dict[int, tuple[int, int]] = {}  # recent bursts: (in flight after the first send, after the last)
        self._decreased_after = 0  # requests sent before the last decrease for queueing
        self._undo_to: float | None = None  # the limit before decreases made without evidence
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
            burst = self._releases
            self._bursts[burst] = (self._bursts.get(burst, (self.in_flight,))[0], self.in_flight)
            if len(self._bursts) > HISTORY:
                del self._bursts[next(iter(self._bursts))]  # the oldest: dicts keep insertion order
            return Sent(self.in_flight, self._sent, burst)

    def release(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self._releases += 1
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

    def on_success(self, latency_s: float, step: str, sent: Sent) -> None:
        """Learn from one reply of ``step`` that took ``latency_s``; ``sent`` is its :meth:`slot` ticket."""
        with self._cond:
            level = self._level(sent)
            if level is not None:
                self._by_level.setdefault(step, {}).setdefault(level, deque(maxlen=LEVEL_WINDOW)).append(
                    (sent.number, latency_s)
                )
            baseline = self._baseline(step)
            if baseline is None or latency_s <= self.grow_below * baseline:
                self._unqueued.add(step)
            best = min(self._best_latency.get(step, latency_s), latency_s)
            recent = 0.7 * self._recent.get(step, latency_s) + 0.3 * latency_s
            self._best_latency[step], self._recent[step] = best, recent
            typical = self._typical.get(step)
            yardstick = typical or best
            # While decreases made without evidence stand, anything short of clearly unqueued asks again.
            alarm = self.queue_factor if self._undo_to is None else self.grow_below
            if recent >= alarm * yardstick:
                self._slow_streak(step, level, sent, yardstick)
            elif typical is not None:
                if recent <= self.grow_below * typical:
                    self._grow()
            elif baseline is not None and max(recent, latency_s) <= self.grow_below * min(baseline, best):
                self._grow()
            self._cond.notify_all()
        self._report()

    def _slow_streak(self, step: str, level: int | None, sent: Sent, yardstick: float) -> None:
        """A queue, or replies that vary? :meth:`_judge` decides; this acts on it."""
        queued, proven, typical = self._judge(step, level)
        if not queued:
            self._typical[step] = typical
            if proven and self._undo_to is not None:  # the decreases presumed were wrong: undo them
                self.limit, self._undo_to = max(self.limit, self._undo_to), None
            return
        # Once per round trip, as TCP's fast recovery: replies sent before the last decrease show
        # the queue that decrease already answered.
        if sent.number > self._decreased_after:
            if proven:
                self._undo_to = None
            elif self._undo_to is None:
                self._undo_to = self.limit
            self._decrease()
            self._decreased_after = self._sent
        self._recent[step] = yardstick * self.grow_below  # give the smaller limit a fresh start

    def _level(self, sent: Sent) -> int | None:
        """The level a reply is filed under: our requests in flight once its burst was out. Threads
        race from slot to socket, so the server sees a burst's requests in any order (the first
        ticket of a first contact was seen served last); replies pace the sends after it, and their
        order holds. None for a burst sent from idle (first contact, a resumed limit): its replies
        waited anything from nothing to the whole burst, which says little about the level it reached."""
        if sent.burst not in self._bursts:  # a ticket from elsewhere, or older than the history
            return sent.level
        first, last = self._bursts[sent.burst]
        return None if first == 1 and last > 1 else last

    def _grow(self) -> None:
        # Slow start: +1 per success (×2 per round trip); then +1 per ``limit`` successes (+1 per round trip).
        self.limit = min(self.maximum, self.limit + (1.0 if self.slow_start else 1.0 / self.limit))

    def _judge(self, step: str, level: int | None) -> tuple[bool, bool, float]:
        """(queued, proven, ``step``'s typical unqueued latency if not queued) for a slow streak.

        A queue makes replies slower the more of ours are in flight; variance does not. So the
        replies sent near ``level`` (above half of it) are compared with those sent at half of it
        or lower: :data:`LEVEL_FACTOR` times slower is a queue, less is variance. With no replies
        that low, with those sent at twice the level or more: not that much slower there either,
        and there is no queue even at twice this level. Without either (first contact), a queue
        is presumed. Alone in flight, a reply had none of ours to wait behind: whatever it took
        is unqueued, though that proves nothing about higher levels."""
        if level is None:
            return True, False, self._best_latency[step]
        replies = {s: self._replies(s) for s in self._by_level}  # filtered once, read by all that follows
        # Not queued at this level: every reply of the step sent at it or lower came back unqueued.
        typical = median(x for k, xs in replies[step].items() if k <= level for x in xs)
        if level <= 1:
            return False, False, typical
        near = range(level // 2 + 1, level + 1)
        below = self._slowdown(replies.values(), lambda k: k <= level / 2, lambda k: k in near)
        if below is not None:
            return below >= LEVEL_FACTOR, True, typical
        above = self._slowdown(replies.values(), lambda k: k in near, lambda k: k >= 2 * level)
        if above is not None and above < LEVEL_FACTOR:
            return False, True, typical
        return True, False, typical

    def _replies(self, step: str) -> dict[int, list[float]]:
        """``step``'s latencies by level, of requests sent within the last :data:`HORIZON` sends:
        comparisons are about the endpoint as it is now, not as it was before it got busier."""
        since = self._sent - HORIZON
        by_level = {k: [x for n, x in replies if n > since] for k, replies in self._by_level.get(step, {}).items()}
        return {k: xs for k, xs in by_level.items() if xs}

    @staticmethod
    def _slowdown(
        replies: Iterable[dict[int, list[float]]], low: Callable[[int], bool], high: Callable[[int], bool]
    ) -> float | None:
        """How much slower replies at ``high`` levels come back than at ``low`` ones: per step (steps
        differ in reply length), the ratio of their medians, and its median over the steps that have
        both. The lowest ``low`` levels count first, until there are :data:`REFERENCE_REPLIES` of
        them. None with fewer than that many in all: one reply is noise."""
        ratios, counted = [], 0
        for by_level in replies:
            reference: list[float] = []
            for k in sorted(k for k in by_level if low(k)):
                if len(reference) >= REFERENCE_REPLIES:
                    break
                reference.extend(by_level[k])
            compared = [x for k, xs in by_level.items() if high(k) for x in xs]
            if reference and compared:
                ratios.append(median(compared) / median(reference))
                counted += len(reference)
        return median(ratios) if counted >= REFERENCE_REPLIES else None

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
