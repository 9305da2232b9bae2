"""Can this golden set see the difference you care about? Power and the minimum detectable Δ.

Before trusting "no significant difference", ask whether the set could have shown
one. For a paired comparison with clustered standard error SE (from the observed
per-item differences, :func:`ragtrack.evaluation.stats.clustered_se`), a two-sided
test at level α detects a true difference Δ with probability 1 − β when

    Δ ≥ (z_{1−α/2} + z_{1−β}) · SE        (≈ 2.80 · SE at α = 0.05, 80 % power)

That bound is the *minimum detectable effect* (MDE). SE shrinks as 1/√N for a set
of N items drawn alike (same share of items per document), so the items needed for
a Δ the user names are N · (MDE / Δ)². This is the normal-approximation power
analysis of Miller (2024), "Adding Error Bars to Evals", §5 (there with the paired
variance; here with its clustered form).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

ALPHA, POWER = 0.05, 0.80


def multiplier(alpha: float = ALPHA, power: float = POWER) -> float:
    """z_{1−α/2} + z_{power}: how many standard errors the MDE is (2.80 at the defaults)."""
    return NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)


@dataclass(frozen=True)
class Power:
    """The minimum detectable Δ of one metric on a set of ``n`` items, and the items a target Δ needs."""

    metric: str
    n: int
    se: float
    mde: float
    delta: float | None = None  # the Δ the user asked about
    items_needed: int | None = None  # for ``delta``; None when the set shows no paired variation (se 0)

    @property
    def estimable(self) -> bool:
        """Whether the items varied at all: every difference alike (se 0) leaves the MDE unknown, not 0."""
        return self.se > 0

    def detects(self, delta: float) -> bool:
        """Whether an observed |Δ| is at least the MDE (a smaller one may be noise at this size)."""
        return self.estimable and abs(delta) >= self.mde


def power_of(metric: str, n: int, se: float, delta: float | None = None, alpha: float = ALPHA, power: float = POWER):
    """The MDE from a clustered standard error; with ``delta``, the items it needs at this design."""
    if delta is not None and delta <= 0:
        raise ValueError(f"the difference to detect must be positive, got {delta:g}")
    mde = multiplier(alpha, power) * se
    needed = max(2, math.ceil(n * (mde / delta) ** 2)) if delta is not None and se > 0 else None
    return Power(metric, n, se, mde, delta, needed)
