"""How sure is a difference? Paired statistics over per-item scores.

Golden sets are small (10–50 items): a two-point gain in a mean can be one item
flipping. Both versions answer the same items, so the comparison is *paired*:
we look at the per-item differences d_i = b_i − a_i.

* :func:`paired_bootstrap_ci` — resample items with replacement, take the mean
  difference each time; the 2.5th and 97.5th percentiles bound a 95% interval.
* :func:`paired_permutation_p` — under "no difference", each d_i is as likely
  to have the opposite sign; the p-value is the share of sign flips whose mean
  is at least as extreme as the observed one (exact for n ≤ 16, Monte Carlo
  beyond).

Both are seeded, so the same inputs always print the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairedDifference:
    n: int
    mean_a: float
    mean_b: float
    delta: float  # mean(b) - mean(a)
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def testable(self) -> bool:
        """Whether the sign-flip test can reach p < 0.05 at all: its smallest p is 2 / 2^n, so not for n ≤ 5."""
        return self.n > 0 and 2.0 / 2**self.n < 0.05

    @property
    def significant(self) -> bool:
        """The 95% interval excludes zero and the permutation p-value is below 0.05.

        With five pairs or fewer the bootstrap interval can exclude zero (every difference
        has the same sign) while no test could call it significant: never marked.
        """
        return (self.ci_low > 0 or self.ci_high < 0) and self.p_value < 0.05

    @property
    def p_text(self) -> str:
        """The p-value for a reader, three decimals; below 0.001 as such, never a misleading 0.000."""
        return p_text(self.p_value)


def p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def paired_bootstrap_ci(
    diffs: Sequence[float], resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def paired_permutation_p(diffs: Sequence[float], resamples: int = 20_000, seed: int = 0) -> float:
    """Two-sided sign-flip test of mean(d) = 0."""
    d = np.asarray(diffs, dtype=float)
    if d.size == 0 or not np.any(d):
        return 1.0
    observed = abs(d.mean())
    if d.size <= 16:  # every one of the 2^n sign patterns: the exact test
        bits = (np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1
        signs = 1.0 - 2.0 * bits
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(resamples, d.size))
    flipped = np.abs((signs * d).mean(axis=1))
    at_least = int(np.sum(flipped >= observed - 1e-12))
    if d.size <= 16:
        return at_least / len(signs)
    # Sampled: the observed signs count as one draw (Phipson & Smyth 2010), so p is never 0.
    return (at_least + 1) / (resamples + 1)


def compare_paired(a: Sequence[float], b: Sequence[float], seed: int = 0) -> PairedDifference:
    """Summary of b versus a over the same items (same order)."""
    if len(a) != len(b):
        raise ValueError("paired scores need the same items on both sides")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    low, high = paired_bootstrap_ci(diffs, seed=seed)
    n = len(diffs)
    return PairedDifference(
        n=n,
        mean_a=float(np.mean(a)) if n else 0.0,
        mean_b=float(np.mean(b)) if n else 0.0,
        delta=float(np.mean(diffs)) if n else 0.0,
        ci_low=low,
        ci_high=high,
        p_value=paired_permutation_p(diffs, seed=seed),
    )
