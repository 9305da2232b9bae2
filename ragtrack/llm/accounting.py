"""Per-step accounting: calls, cache hits, tokens, cost, latency percentiles.

Users of peer tools rarely know what an eval run cost or where its time went;
ragtrack logs these figures with every run.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0


@dataclass
class StepStats:
    calls: int = 0  # requests that reached a model
    cached: int = 0  # served from the on-disk cache
    offline: int = 0  # answered by the deterministic offline implementation
    failed: int = 0  # steps that ended in an error after retries / repair
    retries: int = 0
    truncated: int = 0  # replies cut at max_tokens
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list; 0.0 for an empty one."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Accounting:
    """Thread-safe counters keyed by step name."""

    def __init__(self, prices: dict[str, Price] | None = None):
        self._lock = threading.Lock()
        self._steps: dict[str, StepStats] = defaultdict(StepStats)
        self.prices = prices or {}

    def add(self, step: str, **counts: float) -> None:
        with self._lock:
            stats = self._steps[step]
            for key, value in counts.items():
                if key == "latency":
                    stats.latencies.append(value)
                else:
                    setattr(stats, key, getattr(stats, key) + value)

    def cost(self, model: str, stats: StepStats) -> float:
        price = self.prices.get(model, Price())
        return (stats.tokens_in * price.input + stats.tokens_out * price.output) / 1e6

    def summary(self, model: str) -> dict[str, dict[str, float]]:
        """Per-step figures plus a ``total`` row, as plain numbers."""
        with self._lock:
            steps = {name: StepStats(**vars(s)) for name, s in self._steps.items()}
        out: dict[str, dict[str, float]] = {}
        total = StepStats()
        for name, s in sorted(steps.items()):
            out[name] = self._row(model, s)
            for key in ("calls", "cached", "offline", "failed", "retries", "truncated", "tokens_in", "tokens_out"):
                setattr(total, key, getattr(total, key) + getattr(s, key))
            total.latencies.extend(s.latencies)
        if out:
            out["total"] = self._row(model, total)
        return out

    def _row(self, model: str, s: StepStats) -> dict[str, float]:
        return {
            "calls": s.calls,
            "cached": s.cached,
            "offline": s.offline,
            "failed": s.failed,
            "retries": s.retries,
            "truncated": s.truncated,
            "tokens_in": s.tokens_in,
            "tokens_out": s.tokens_out,
            "cost_usd": round(self.cost(model, s), 6),
            "latency_p50_s": round(percentile(s.latencies, 50), 4),
            "latency_p95_s": round(percentile(s.latencies, 95), 4),
        }
