"""How sure is a difference? Paired, clustered statistics over per-item scores.

Golden sets are small (10–50 items): a two-point gain in a mean can be one item
flipping. Both versions answer the same items, so the comparison is *paired*:
we look at the per-item differences d_i = b_i − a_i. Two more facts of real
golden sets shape the interval:

* **Items are not independent.** Several questions about one document rise and
  fall together (a chunking change fixes or breaks all of them), so the unit is
  the *cluster* (by default the items sharing GT documents,
  :mod:`ragtrack.evaluation.clustering`), not the item: the clustered standard
  error of Miller (2024), "Adding Error Bars to Evals: A Statistical Approach to
  Language Model Evaluations" (arXiv:2411.00640), eq. 4.
* **Few clusters.** With C clusters the standard error is estimated from C sums,
  so the interval is Student's t (Cameron & Miller 2015, "A Practitioner's Guide
  to Cluster-Robust Inference", *J. Human Resources* 50:317–372, §VI) on the CR2
  (bias-reduced) standard error of Bell & McCaffrey (2002), which for a mean
  weighs each cluster's residual sum by 1 / (1 − n_c / N), with their degrees of
  freedom: C − 1 when clusters are equal, fewer when one cluster holds much of the
  set (where the plain C / (C − 1) correction and C − 1 flatter). Measured by
  ``benchmarks/stats_simulation.py``: 93–97 % coverage with independent items, 16
  and 5–8 unequal clusters, multi-document items and per-type rows of 12 items
  with ties at the ceiling, where the percentile bootstrap this replaces covered
  78 % (n = 12) and 88 % (items spanning two documents).
* **A judge disagrees with itself.** Asked K times (``--judge-samples``), the
  item's score is the mean of K verdicts; the spread of those item means already
  holds the judge's noise, so the same interval carries both levels (resampling
  the verdicts again would count it twice). :attr:`PairedDifference.within_sd`
  reports how much of it there was.
* **No variation is not certainty.** When every cluster's differences are alike
  (both versions at the judge's ceiling on every item) the standard error is 0:
  no interval is printed ("no variation in n items — not evidence"), and the
  promotion gate does not count such a metric as shown.

Functions:

* :func:`clustered_se` — the CR2 cluster-robust standard error of the mean.
* :func:`t_interval` — mean ± t_{C−1, 0.975} · SE.
* :func:`paired_permutation_p` — under "no difference", each cluster's summed
  difference is as likely to have the opposite sign; the p-value is the share of
  sign flips whose mean is at least as extreme as the observed one (exact for
  ≤ 16 clusters, Monte Carlo beyond). Its smallest value is 2 / 2^C: with five
  clusters or fewer no test at 5 % is possible, and nothing is marked.
* :func:`between_share` — how much of the variance of the mean is between
  clusters (what more items on the same documents cannot reduce,
  :mod:`ragtrack.evaluation.power`).

All are deterministic (the sign-flip test beyond 16 clusters is seeded).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Judge samples of one item: the K verdicts of version A and those of version B (same metric scale).
ItemSamples = tuple[Sequence[float], Sequence[float]]

#: The sign-flip test's smallest p is 2 / 2^C: below 6 clusters it cannot reach 0.05.
MIN_TESTABLE_UNITS = 6


@dataclass(frozen=True)
class PairedDifference:
    n: int
    mean_a: float
    mean_b: float
    delta: float  # mean(b) - mean(a)
    ci_low: float
    ci_high: float
    p_value: float
    clusters: int = 0  # clusters the interval and the test used; 0: each item its own
    se: float = 0.0  # clustered (CR2) standard error of delta
    judge_samples: int = 1  # most judge samples an item had (1: one verdict each)
    within_sd: float | None = None  # mean within-item SD of d over the judge samples (None: one verdict)
    largest: int = 1  # items in the largest cluster
    between: float = 0.0  # share of the variance of delta between clusters (0: each item its own)
    dof: float | None = None  # the t interval's degrees of freedom (None: units − 1)

    @property
    def units(self) -> int:
        """How many independent units the test had: clusters, or items when each is its own."""
        return self.clusters or self.n

    @property
    def df(self) -> float:
        """Degrees of freedom of the t interval: Bell–McCaffrey's (units − 1 with equal clusters, fewer
        when they are unequal)."""
        return self.dof if self.dof is not None else max(self.units - 1, 0)

    @property
    def varies(self) -> bool:
        """Whether the differences varied between units at all: without, there is no interval, only a note."""
        return self.se > 0 and self.df > 0

    @property
    def testable(self) -> bool:
        """Whether the sign-flip test can reach p < 0.05 at all: its smallest p is 2 / 2^C, so not for C ≤ 5."""
        return self.units >= MIN_TESTABLE_UNITS

    @property
    def significant(self) -> bool:
        """The 95% interval excludes zero and the permutation p-value is below 0.05.

        With five clusters or fewer the t interval can exclude zero while no sign-flip test could
        call it significant: never marked.
        """
        return self.varies and self.testable and self.excludes_zero and self.p_value < 0.05

    @property
    def excludes_zero(self) -> bool:
        return self.varies and (self.ci_low > 0 or self.ci_high < 0)

    @property
    def p_text(self) -> str:
        """The p-value for a reader, three decimals; below 0.001 as such, never a misleading 0.000."""
        return p_text(self.p_value)

    @property
    def no_variation(self) -> str:
        """What is printed instead of an interval when there is none (``""`` when there is one)."""
        if self.varies:
            return ""
        if self.n and self.df == 0:
            return f"one cluster of {self.n} items — no interval"
        return f"no variation in {self.n} items — not evidence"

    def interval_text(self, digits: int = 3) -> str:
        """``[+0.012, +0.345]``, or :attr:`no_variation`."""
        return self.no_variation or f"[{self.ci_low:+.{digits}f}, {self.ci_high:+.{digits}f}]"


def p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def cluster_codes(clusters: Sequence[Hashable] | None, n: int) -> np.ndarray:
    """Cluster labels → 0..C−1 in order of first appearance; None: every item its own cluster."""
    if clusters is None:
        return np.arange(n)
    if len(clusters) != n:
        raise ValueError("one cluster label per item")
    codes: dict[Hashable, int] = {}
    return np.array([codes.setdefault(c, len(codes)) for c in clusters], dtype=int)


def clustered_se(diffs: Sequence[float], clusters: Sequence[Hashable] | None = None) -> float:
    """CR2 cluster-robust standard error of mean(d): √(Σ_c u_c² / (1 − n_c/N)) / N, u_c the cluster's summed
    residual d_i − d̄ and n_c its size (Bell & McCaffrey 2002 for a mean; equal clusters: the CR1 factor
    C/(C−1) of Miller 2024, eq. 4). Every item its own cluster: the usual s / √n."""
    d = np.asarray(diffs, dtype=float)
    if d.size < 2:
        return 0.0
    codes = cluster_codes(clusters, d.size)
    c = int(codes.max()) + 1
    if c < 2:
        return 0.0
    u = np.bincount(codes, weights=d - d.mean(), minlength=c)
    sizes = np.bincount(codes, minlength=c)
    variance = float(np.sum(u**2 / (1 - sizes / d.size))) / d.size**2
    return float(np.sqrt(variance)) if variance > 1e-24 else 0.0


def degrees_of_freedom(clusters: Sequence[Hashable] | None, n: int) -> float:
    """Bell & McCaffrey's (2002) degrees of freedom of the CR2 variance of a mean: (tr B)² / tr(B²) with
    B = diag(1/(1 − n_c/N)) · (diag(n_c) − n nᵀ/N). Equal clusters: exactly C − 1 (n − 1 for items);
    unequal ones: fewer, as a set dominated by one large document holds less information than C suggests
    (at cluster sizes 12, 9, 8, 6, 5, 4, 2, 2: 5.2 instead of 7)."""
    if n < 2:
        return 0.0
    sizes = np.bincount(cluster_codes(clusters, n)).astype(float)
    if sizes.size < 2:
        return 0.0
    b = (np.diag(sizes) - np.outer(sizes, sizes) / n) / (1 - sizes / n)[:, None]
    return float(np.trace(b) ** 2 / np.sum(b * b.T))


def t_interval(
    values: Sequence[float], clusters: Sequence[Hashable] | None = None, confidence: float = 0.95
) -> tuple[float, float]:
    """mean ± t_df · CR2 SE (df: :func:`degrees_of_freedom`, C − 1 for equal clusters; each item its own
    cluster when none are given); the mean twice when the values do not vary between clusters (no
    interval: see :attr:`PairedDifference.no_variation`)."""
    from scipy.stats import t

    d = np.asarray(values, dtype=float)
    if d.size == 0:
        return 0.0, 0.0
    mean, se = float(d.mean()), clustered_se(d, clusters)
    df = degrees_of_freedom(clusters, d.size)
    if se == 0 or df <= 0:
        return mean, mean
    half = float(t.ppf(1 - (1 - confidence) / 2, df)) * se
    return mean - half, mean + half


def between_share(diffs: Sequence[float], clusters: Sequence[Hashable] | None = None) -> float:
    """The share of the variance of mean(d) due to clusters (one-way random effects, method of moments):
    Σ n_c² σ_b² / (Σ n_c² σ_b² + N σ_w²), clipped to [0, 1]; 0 when each item is its own cluster."""
    d = np.asarray(diffs, dtype=float)
    if clusters is None or d.size < 3:
        return 0.0
    codes = cluster_codes(clusters, d.size)
    c, n = int(codes.max()) + 1, d.size
    if c < 2 or c == n:
        return 0.0
    sizes = np.bincount(codes, minlength=c)
    means = np.bincount(codes, weights=d, minlength=c) / sizes
    within = float(np.sum((d - means[codes]) ** 2)) / (n - c)
    between_ms = float(np.sum(sizes * (means - d.mean()) ** 2)) / (c - 1)
    n0 = (n - float(np.sum(sizes**2)) / n) / (c - 1)
    sigma_b = max(0.0, (between_ms - within) / n0)
    part_b, part_w = sigma_b * float(np.sum(sizes**2)), n * within
    return part_b / (part_b + part_w) if part_b + part_w > 0 else 0.0


def paired_permutation_p(
    diffs: Sequence[float], resamples: int = 20_000, seed: int = 0, clusters: Sequence[Hashable] | None = None
) -> float:
    """Two-sided sign-flip test of mean(d) = 0, flipping whole clusters (each item its own by default)."""
    d = np.asarray(diffs, dtype=float)
    if d.size == 0 or not np.any(d):
        return 1.0
    codes = cluster_codes(clusters, d.size)
    t = np.bincount(codes, weights=d)  # each cluster's summed difference
    observed = abs(t.sum())
    exact = t.size <= 16
    signs = _all_signs(t.size) if exact else np.random.default_rng(seed).choice((1.0, -1.0), size=(resamples, t.size))
    flipped = np.abs(signs @ t)
    at_least = int(np.sum(flipped >= observed - 1e-9 * max(1.0, observed)))
    if exact:
        return at_least / len(signs)
    # Sampled: the observed signs count as one draw (Phipson & Smyth 2010), so p is never 0.
    return (at_least + 1) / (resamples + 1)


@lru_cache(maxsize=17)
def _all_signs(n: int) -> np.ndarray:
    """Every one of the 2^n sign patterns, one per row (kept: compare tests dozens of rows alike)."""
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    return 1.0 - 2.0 * bits


def compare_paired(
    a: Sequence[float],
    b: Sequence[float],
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
    samples: Sequence[ItemSamples] | None = None,
    resamples: int = 20_000,
    test: bool = True,
) -> PairedDifference:
    """Summary of b versus a over the same items (same order), clustered when ``clusters`` are given.
    ``samples`` (per item, the judge verdicts behind each side's score) only report the judge's own
    noise (:attr:`PairedDifference.within_sd`): the interval already carries it. ``resamples`` and
    ``seed``: the sign-flip test's, beyond 16 clusters; ``test=False`` skips it (p 1: a simulation of the
    interval gate, which reads only the interval, runs thousands of evals)."""
    if len(a) != len(b):
        raise ValueError("paired scores need the same items on both sides")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    if samples is not None and len(samples) != n:
        raise ValueError("one pair of sample lists per item")
    if samples is not None and not any(len(sa) > 1 or len(sb) > 1 for sa, sb in samples):
        samples = None  # one verdict per item: no judge noise to report
    low, high = t_interval(diffs, clusters)
    codes = cluster_codes(clusters, n) if n else np.zeros(0, dtype=int)
    return PairedDifference(
        n=n,
        mean_a=float(np.mean(a)) if n else 0.0,
        mean_b=float(np.mean(b)) if n else 0.0,
        delta=float(np.mean(diffs)) if n else 0.0,
        ci_low=low,
        ci_high=high,
        p_value=paired_permutation_p(diffs, resamples, seed=seed, clusters=clusters) if test else 1.0,
        clusters=int(codes.max()) + 1 if clusters is not None and n else 0,
        se=clustered_se(diffs, clusters),
        judge_samples=max((max(len(sa), len(sb)) for sa, sb in samples), default=1) if samples else 1,
        within_sd=float(np.mean([np.sqrt(_within(sa) + _within(sb)) for sa, sb in samples])) if samples else None,
        largest=int(np.bincount(codes).max()) if n else 0,
        between=between_share(diffs, clusters),
        dof=degrees_of_freedom(clusters, n),
    )


def _within(verdicts: Sequence[float]) -> float:
    """The variance of one item's mean verdict from its K verdicts: s² / K (0 for one)."""
    x = np.asarray(verdicts, dtype=float)
    return float(x.var(ddof=1)) / x.size if x.size > 1 else 0.0


def proportion_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a rate ``successes / n`` (scipy's): unlike the normal approximation it
    stays inside [0, 1] and does not collapse to a point at 0 of 20 dislikes. ``(0, 1)`` for ``n = 0``."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """t interval of the mean of ``values`` (the paired case's interval, each value its own unit)."""
    return t_interval(values, confidence=confidence)
