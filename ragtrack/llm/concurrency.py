"""How many requests to keep in flight: additive increase, multiplicative decrease.

A fixed worker count is wrong for almost every endpoint: a hosted API can take
dozens of requests at once, a local llama.cpp server serves one at a time and
only queues the rest (its latency grows with every extra request, until
clients time out while the server keeps computing abandoned work).

The limiter starts low and learns. After each success it may grow by one
(additive increase) unless latency shows queueing — a reply taking more than
``queue_factor`` times the fastest one seen for the same step means requests are waiting inside
the server, so more concurrency buys nothing. On an overload signal (429, 503,
timeout) or heavy queueing it halves (multiplicative decrease).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class AdaptiveLimiter:
    def __init__(self, maximum: int, initial: int = 2, queue_factor: float = 1.8):
        self.maximum = max(1, maximum)
        self.limit = float(min(self.maximum, max(1, initial)))
        self.queue_factor = queue_factor
        self.in_flight = 0
        self.peak_in_flight = 0
        self._best_latency: dict[str, float] = {}  # per step: replies of one step have similar lengths
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
            best = self._best_latency.get(step)
            self._best_latency[step] = latency_s if best is None else min(best, latency_s)
            if best is not None and latency_s > 2 * self.queue_factor * best:
                self._decrease()
            elif best is None or latency_s <= self.queue_factor * best:
                # One more slot per ``limit`` successes ≈ +1 per round trip.
                self.limit = min(self.maximum, self.limit + 1.0 / self.limit)
            self._cond.notify_all()

    def on_overload(self) -> None:
        with self._cond:
            self._decrease()

    def _decrease(self) -> None:
        self.limit = max(1.0, self.limit / 2)
