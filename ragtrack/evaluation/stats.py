"""How sure is a difference? Paired, clustered statistics over per-item scores.

Golden sets are small (10–50 items): a two-point gain in a mean can be one item
flipping. Both versions answer the same items, so the comparison is *paired*:
we look at the per-item differences d_i = b_i − a_i. Two more facts of real
golden sets shape the interval:

* **Items are not independent.** Several questions about one document rise and
  fall together (a chunking change fixes or breaks all of them), so the unit of
  resampling is the *cluster* (by default the item's GT document), not the item.
  This is the clustered standard error of Miller (2024), "Adding Error Bars to
  Evals: A Statistical Approach to Language Model Evaluations" (arXiv:2411.00640),
  done by resampling whole clusters (the cluster bootstrap).
* **A judge disagrees with itself.** Asked K times (``--judge-samples``), the
  item's score is the mean of K verdicts and the interval carries both levels of
  noise: a *two-level bootstrap* resamples clusters, then each item's judge
  samples (Davison & Hinkley 1997, *Bootstrap Methods and their Application*,
  §3.8). Resampling both levels naively counts the judge noise twice (it is
  already inside the spread of item means), so the item deviations are shrunk
  by the share of the spread the judge samples explain, as in the random-effects
  bootstrap of Carpenter, Goldstein & Rasbash (2003): the resampled means then
  have the variance of the clustered estimate, one part from each level.

Functions:

* :func:`paired_bootstrap_ci` — percentile interval of the mean difference from
  resampled clusters (each item its own cluster when none are given). The plain
  percentile interval is too narrow for few units (its variance lacks the
  C / (C − 1) factor and its tails ignore that the spread is estimated from C
  units), which matters at 15 documents; so it is the *expanded* percentile
  interval of Hesterberg (2015, "What Teachers Should Know About the Bootstrap",
  *The American Statistician* 69:371–386): the percentiles taken at α′/2 with
  Φ⁻¹(α′/2) = √(C/(C−1)) · t_{C−1, α/2}.
* :func:`paired_permutation_p` — under "no difference", each cluster's summed
  difference is as likely to have the opposite sign; the p-value is the share of
  sign flips whose mean is at least as extreme as the observed one (exact for
  ≤ 16 clusters, Monte Carlo beyond).
* :func:`clustered_se` — the cluster-robust standard error of the mean difference
  (Miller 2024, eq. 4), which :mod:`ragtrack.evaluation.power` turns into a
  minimum detectable difference.

All are seeded, so the same inputs always print the same interval.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Judge samples of one item: the K verdicts of version A and those of version B (same metric scale).
ItemSamples = tuple[Sequence[float], Sequence[float]]


@dataclass(frozen=True)
class PairedDifference:
    n: int
    mean_a: float
    mean_b: float
    delta: float  # mean(b) - mean(a)
    ci_low: float
    ci_high: float
    p_value: float
    clusters: int = 0  # clusters the interval and the test resampled; 0: each item its own
    se: float = 0.0  # clustered standard error of delta
    judge_samples: int = 1  # most judge samples an item had (1: one verdict each)
    within_sd: float | None = None  # mean within-item SD of d over the judge samples (None: one verdict)

    @property
    def units(self) -> int:
        """How many independent units the test had: clusters, or items when each is its own."""
        return self.clusters or self.n

    @property
    def testable(self) -> bool:
        """Whether the sign-flip test can reach p < 0.05 at all: its smallest p is 2 / 2^C, so not for C ≤ 5."""
        return self.units > 0 and 2.0 / 2**self.units < 0.05

    @property
    def significant(self) -> bool:
        """The 95% interval excludes zero and the permutation p-value is below 0.05.

        With five clusters or fewer the bootstrap interval can exclude zero (every difference
        has the same sign) while no test could call it significant: never marked.
        """
        return self.excludes_zero and self.p_value < 0.05

    @property
    def excludes_zero(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def p_text(self) -> str:
        """The p-value for a reader, three decimals; below 0.001 as such, never a misleading 0.000."""
        return p_text(self.p_value)


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
    """Cluster-robust standard error of mean(d): √(C/(C−1) · Σ_c (Σ_{i∈c} (d_i − d̄))²) / N.

    With every item its own cluster this is the usual s / √n. Miller (2024), eq. 4.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size < 2:
        return 0.0
    codes = cluster_codes(clusters, d.size)
    c = int(codes.max()) + 1
    if c < 2:
        return 0.0
    u = np.bincount(codes, weights=d - d.mean(), minlength=c)
    return float(np.sqrt(c / (c - 1) * np.sum(u**2)) / d.size)


def paired_bootstrap_ci(
    diffs: Sequence[float],
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
    samples: Sequence[ItemSamples] | None = None,
) -> tuple[float, float]:
    """Percentile interval of mean(d) from ``resamples`` cluster resamples (see the module docstring).

    ``clusters``: one label per item (None: each item its own). ``samples``: per item, the judge
    samples behind its difference (``d_i = mean(B samples) − mean(A samples)``); with them the
    interval is the two-level bootstrap.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return 0.0, 0.0
    codes = cluster_codes(clusters, d.size)
    c = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    residuals = d - d.mean()
    noise = _sample_residuals(samples, d.size) if samples is not None else None
    shrink = 1.0
    if noise is not None:
        # The spread of item means already holds the judge noise; keep only the rest of it at the top level.
        between = float(np.sum(np.bincount(codes, weights=residuals, minlength=c) ** 2))
        within = sum(w for _, _, w in noise)
        shrink = float(np.sqrt(max(0.0, 1.0 - within / between))) if between > 0 else 0.0
    values = d.mean() + shrink * residuals
    sums, sizes = np.bincount(codes, weights=values, minlength=c), np.bincount(codes, minlength=c)
    means = np.empty(resamples)
    for start in range(0, resamples, 2_000):  # blocks bound the memory of a large set's resamples
        r = min(2_000, resamples - start)
        picks = rng.integers(0, c, size=(r, c))
        total, count = sums[picks].sum(axis=1), sizes[picks].sum(axis=1)
        if noise is not None:
            rows = np.repeat(np.arange(r), c) * c
            times = np.bincount(rows + picks.ravel(), minlength=r * c).reshape(r, c)  # each cluster's draws
            total += _noise_sums(rng, noise, times[:, codes])
        means[start : start + r] = total / count
    tail = expanded_tail(confidence, c) * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def expanded_tail(confidence: float, units: int) -> float:
    """The tail share α′/2 of Hesterberg's expanded percentile interval for ``units`` resampled units:
    Φ⁻¹(α′/2) = √(C/(C−1)) · t_{C−1, α/2}; the plain α/2 for fewer than two units."""
    from scipy.stats import norm, t

    alpha = 1 - confidence
    if units < 2:
        return alpha / 2
    return float(norm.cdf(np.sqrt(units / (units - 1)) * t.ppf(alpha / 2, units - 1)))


def _sample_residuals(samples: Sequence[ItemSamples], n: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Per item: A's and B's centred judge samples, scaled so a resampled mean has the unbiased variance
    s²/K, and the item's within-judge variance of d (s_a²/K_a + s_b²/K_b)."""
    if len(samples) != n:
        raise ValueError("one pair of sample lists per item")
    out = []
    for sa, sb in samples:
        sides, within = [], 0.0
        for s in (sa, sb):
            x = np.asarray(s, dtype=float)
            if x.size < 2:
                sides.append(np.zeros(1))
                continue
            within += float(x.var(ddof=1)) / x.size
            sides.append((x - x.mean()) * np.sqrt(x.size / (x.size - 1)))
        out.append((sides[0], sides[1], within))
    return out


def _noise_sums(rng: np.random.Generator, noise: list, times: np.ndarray, pool: int = 2_000) -> np.ndarray:
    """Per resample, the judge noise added to its total: for each item drawn ``times[r, i]`` times, that
    many independent draws of (resampled mean of B's centred samples − that of A's). Each item's draws
    come from a pool of ``pool`` such resampled differences, made once (one array operation per item
    instead of one per item and resample)."""
    n = len(noise)
    bank = np.zeros((n, pool))
    for i, (ra, rb, _) in enumerate(noise):
        for res, sign in ((rb, 1.0), (ra, -1.0)):
            if res.size > 1 and np.any(res):
                bank[i] += sign * res[rng.integers(0, res.size, size=(pool, res.size))].mean(axis=1)
    most = int(times.max()) if times.size else 0
    picks = rng.integers(0, pool, size=(times.shape[0], n, most))
    draws = bank[np.arange(n)[None, :, None], picks]
    used = np.arange(most)[None, None, :] < times[:, :, None]
    return np.where(used, draws, 0.0).sum(axis=(1, 2))


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
    resamples: int = 10_000,
) -> PairedDifference:
    """Summary of b versus a over the same items (same order), clustered when ``clusters`` are given,
    two-level when the items' judge ``samples`` are."""
    if len(a) != len(b):
        raise ValueError("paired scores need the same items on both sides")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    if samples is not None and not any(len(sa) > 1 or len(sb) > 1 for sa, sb in samples):
        samples = None  # one verdict per item: nothing to resample within
    low, high = paired_bootstrap_ci(diffs, resamples, seed=seed, clusters=clusters, samples=samples)
    within = None
    if samples is not None:
        within = float(np.mean([np.sqrt(w) for *_, w in _sample_residuals(samples, n)]))
    return PairedDifference(
        n=n,
        mean_a=float(np.mean(a)) if n else 0.0,
        mean_b=float(np.mean(b)) if n else 0.0,
        delta=float(np.mean(diffs)) if n else 0.0,
        ci_low=low,
        ci_high=high,
        p_value=paired_permutation_p(diffs, 2 * resamples, seed=seed, clusters=clusters),
        clusters=int(cluster_codes(clusters, n).max()) + 1 if clusters is not None and n else 0,
        se=clustered_se(diffs, clusters),
        judge_samples=max((max(len(sa), len(sb)) for sa, sb in samples), default=1) if samples else 1,
        within_sd=within,
    )


def proportion_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a rate ``successes / n`` (scipy's): unlike the normal approximation it
    stays inside [0, 1] and does not collapse to a point at 0 of 20 dislikes. ``(0, 1)`` for ``n = 0``."""
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(values: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (the same resampling as the paired case,
    applied to the values themselves)."""
    return paired_bootstrap_ci(values, confidence=confidence, seed=seed)
