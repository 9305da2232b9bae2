"""What LLM work cost: calls, cache hits, tokens, money and latency, per step.

Every step run produces a :class:`Usage`; they add up per step in an
:class:`Accounting`. Usage is plain data that travels with each item record,
so a resumed eval still reports the cost of the whole eval, not only of the
process that finished it. Users of peer tools rarely know what an eval run
cost or where its time went; ragtrack logs these figures with every run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input + tokens_out * self.output) / 1e6


@dataclass
class Usage:
    """Counters of one step: for one call, one item, or a whole run once added up."""

    calls: int = 0  # requests that reached a model
    cached: int = 0  # served from the on-disk cache
    offline: int = 0  # answered by the deterministic offline implementation
    failed: int = 0  # steps that ended in an error after retries / repair
    retries: int = 0
    truncated: int = 0  # replies cut at max_tokens
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def add(self, other: Usage) -> None:
        for f in fields(self):
            if f.name == "latencies":
                self.latencies.extend(other.latencies)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping) -> Usage:
        names = {f.name for f in fields(cls)}
        return cls(**{k: (list(v) if k == "latencies" else v) for k, v in data.items() if k in names})


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list; 0.0 for an empty one."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


class Accounting:
    """Thread-safe :class:`Usage` per step name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[str, Usage] = {}

    def add(self, step: str, usage: Usage) -> None:
        with self._lock:
            self._steps.setdefault(step, Usage()).add(usage)

    def add_all(self, usages: Mapping[str, Usage]) -> None:
        for step, usage in usages.items():
            self.add(step, usage)

    def usage(self) -> dict[str, Usage]:
        """A copy of the counters, per step."""
        with self._lock:
            out = {}
            for name, u in self._steps.items():
                out[name] = Usage()
                out[name].add(u)
            return out

    @classmethod
    def of(cls, usages: Iterable[Mapping[str, Usage]]) -> Accounting:
        """The sum of many per-step usages (e.g. those of every item record)."""
        acc = cls()
        for per_step in usages:
            acc.add_all(per_step)
        return acc

    def summary(self) -> dict[str, dict[str, float]]:
        """Per-step figures plus a ``total`` row, as plain numbers."""
        steps = self.usage()
        out: dict[str, dict[str, float]] = {}
        total = Usage()
        for name, u in sorted(steps.items()):
            out[name] = _row(u)
            total.add(u)
        if out:
            out["total"] = _row(total)
        return out


def _row(u: Usage) -> dict[str, float]:
    return {
        "calls": u.calls,
        "cached": u.cached,
        "offline": u.offline,
        "failed": u.failed,
        "retries": u.retries,
        "truncated": u.truncated,
        "tokens_in": u.tokens_in,
        "tokens_out": u.tokens_out,
        "cost_usd": round(u.cost_usd, 6),
        "latency_p50_s": round(percentile(u.latencies, 50), 4),
        "latency_p95_s": round(percentile(u.latencies, 95), 4),
    }
