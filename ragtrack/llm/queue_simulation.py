"""The adaptive limiter against a simulated server, in virtual time.

Over real HTTP (the LLM benchmark, the tests) one scenario costs seconds to
minutes of sleeping, and a noisy machine blurs it. Here the same queueing — a
server that serves ``capacity`` requests at once and queues the rest in arrival
order, each request taking a drawn service time — runs in milliseconds and
deterministically, so a change to :mod:`ragtrack.llm.concurrency` can be checked
against many endpoints and seeds. It drives the real :class:`AdaptiveLimiter`;
what it leaves out is the client's own overhead (over HTTP a fixed pool of raw
``openai`` calls measures about 1.05 × ideal).

Used by ``benchmarks/limiter_benchmark.py`` and the limiter's tests.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ragtrack.llm.concurrency import AdaptiveLimiter, Sent

JUDGE_STEPS = ("correctness", "groundedness", "relevance", "organization")


@dataclass(frozen=True)
class Scenario:
    """An endpoint and a workload: ``calls`` requests, one step after another in turn."""

    capacity: int
    latency_s: float = 0.25  # mean service time
    calls: int = 192
    spread: float = 0.0  # uniform service times, L × (1 ± spread), as the loopback server's
    lognormal_sigma: float = 0.0  # instead: log-normal with mean L (a long tail of long replies)
    steps: tuple[str, ...] = JUDGE_STEPS
    step_scale: tuple[float, ...] = ()  # per step, a multiple of L (replies of different lengths); default all 1
    maximum: int = 16
    busier_at: tuple[float, int] | None = None  # (time, capacity): other tenants take slots from then on
    resume_at: int | None = None  # start at this limit, learned by an earlier run (no slow start)

    def scale(self, step: str) -> float:
        return self.step_scale[self.steps.index(step)] if self.step_scale else 1.0

    def ideal_s(self) -> float:
        """The best any client can do: every slot busy from start to end."""
        mean = self.latency_s * sum(self.scale(s) for s in self.steps) / len(self.steps)
        if self.busier_at is None:
            return self.calls * mean / self.capacity
        at, capacity = self.busier_at
        before = at * self.capacity / mean  # calls an ideal client finishes before the change
        if before >= self.calls:
            return self.calls * mean / self.capacity
        return at + (self.calls - before) * mean / capacity


@dataclass
class Outcome:
    wall_s: float
    ideal_s: float
    peak_in_flight: int
    final_limit: float
    slowdown: float  # mean latency ÷ mean service time: 1 = nothing waited in the server's queue
    limits: list[float] = field(default_factory=list)  # the limit after each reply

    @property
    def ratio(self) -> float:
        return self.wall_s / self.ideal_s


def simulate(scenario: Scenario, seed: int = 0, limiter: Callable[..., AdaptiveLimiter] = AdaptiveLimiter) -> Outcome:
    """Run ``scenario`` to its last reply with a fresh limiter (``limiter(maximum, **resumed)``); seeded."""
    rng = random.Random(seed)
    resumed = {"initial": scenario.resume_at, "congested": True} if scenario.resume_at else {}
    lim = limiter(scenario.maximum, **resumed)
    pending = deque(scenario.steps[i % len(scenario.steps)] for i in range(scenario.calls))
    queue: deque[tuple[str, float, Sent]] = deque()  # waiting inside the server, in arrival order
    done: list[tuple[float, int, tuple[str, float, Sent]]] = []  # (finish time, tie-break, request)
    now, busy, order, limits, slowdown = 0.0, 0, 0, [], 0.0

    def service(step: str) -> float:
        mean = scenario.latency_s * scenario.scale(step)
        if scenario.lognormal_sigma:
            s = scenario.lognormal_sigma
            return mean * math.exp(rng.gauss(0.0, s) - s * s / 2)
        return mean * (1 + scenario.spread * (2 * rng.random() - 1))

    def capacity() -> int:
        if scenario.busier_at and now >= scenario.busier_at[0]:
            return scenario.busier_at[1]
        return scenario.capacity

    def serve(request: tuple[str, float, Sent]) -> None:
        nonlocal busy, order
        busy, order = busy + 1, order + 1
        heapq.heappush(done, (now + service(request[0]), order, request))

    def send() -> None:
        burst = []
        while pending and (ticket := lim.try_acquire()) is not None:
            burst.append((pending.popleft(), now, ticket))
        rng.shuffle(burst)  # requests sent at once reach the server in any order: threads race to their sockets
        for request in burst:
            if busy < capacity():
                serve(request)
            else:
                queue.append(request)

    send()
    while done:
        now, _, (step, sent_at, ticket) = heapq.heappop(done)
        busy -= 1
        while queue and busy < capacity():
            serve(queue.popleft())
        lim.release()
        lim.on_success(now - sent_at, step, ticket)
        slowdown += (now - sent_at) / (scenario.latency_s * scenario.scale(step)) / scenario.calls
        limits.append(lim.limit)
        send()
    return Outcome(now, scenario.ideal_s(), lim.peak_in_flight, lim.limit, slowdown, limits)
