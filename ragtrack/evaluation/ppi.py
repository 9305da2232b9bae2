"""Prediction-powered inference: a judge's many verdicts, corrected by a few human labels.

A judge scores every item; a person labels a few. The judge-only mean is precise
but biased (a lenient judge overrates every answer); the human-only mean is
unbiased but noisy (few labels). Prediction-powered inference (Angelopoulos,
Bates, Fannjiang, Jordan & Zrnic 2023, "Prediction-powered inference",
*Science* 382:669–674) combines them; its power-tuned form PPI++ (Angelopoulos,
Duchi & Zrnic 2023, arXiv:2311.01453) weighs the judge by λ:

    θ̂(λ) = mean_labelled(y) − λ · (mean_labelled(f) − mean_unlabelled(f))

λ = 1 is plain PPI, λ = 0 the labels alone. Plain PPI can be *wider* than the
labels alone when the judge tracks the labels poorly (up to twice as wide in the
simulation: the labels would have been better used without the judge), so λ is
chosen to minimise the estimated variance, clipped to [0, 1] as ``ppi_py`` does:
the variance is a quadratic in λ whose value at 0 is the labels-only one, so the
chosen interval is **never wider than the labels alone** (same SE formula, same
degrees of freedom).

Three more choices keep the interval honest on a small golden set:

* **clustered** like compare's intervals: an item's labelled and unlabelled
  neighbours share its documents, so the variance is the cluster-robust one of the
  estimator's per-item contributions (labelled: (y − m_y − λ(f − m_f)) / n;
  unlabelled: λ (f − m_u) / N), with the C / (C − 1) factor; each item its own
  cluster, it is ``ppi_py``'s variance times (n + N) / (n + N − 1);
* **t-based**, with (clusters holding a labelled item) − 1 degrees of freedom, one
  fewer when λ is tuned (a slope fitted on the same clusters): the rectifier's spread
  is estimated from those few (z and C − 1 covered 93.1 % with 8 clusters, this 94 %);
* **a minimum of labels**, :data:`MIN_LABELLED`: below it no interval is printed
  (a z interval from two labels covered far less than 95 %).

θ̂ is unbiased for the mean *human* score whatever the judge's bias when the
labelled items are a random subset. For a paired Δ between two versions, f and y
are per-item differences (B − A), on items both versions' answers were labelled
on — so a judge whose bias differs between the versions is corrected too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ragtrack.evaluation.stats import cluster_codes

#: Fewer labelled items give no interval: the rectifier's spread would come from too few.
MIN_LABELLED = 10


@dataclass(frozen=True)
class PPIEstimate:
    estimate: float
    ci_low: float
    ci_high: float
    judge_only: float  # the plain mean of the judge over every item
    labelled: int
    unlabelled: int
    lam: float = 1.0  # the judge's weight (PPI++'s λ; 0: the labels alone)
    se: float = 0.0
    df: int = 0
    labels_only: tuple[float, float] = (0.0, 0.0)  # the interval from the labels alone (same SE formula)


def ppi_mean(
    judge_unlabelled: Sequence[float],
    judge_labelled: Sequence[float],
    human_labelled: Sequence[float],
    confidence: float = 0.95,
    clusters_unlabelled: Sequence[Hashable] | None = None,
    clusters_labelled: Sequence[Hashable] | None = None,
    lam: float | None = None,
) -> PPIEstimate:
    """The power-tuned prediction-powered mean and its clustered t interval (see the module docstring);
    the labelled lists pair up. ``lam`` fixes λ (1: plain PPI) instead of tuning it; clusters, one label
    per item of each list (None: each item its own)."""
    fu, fl, y = (np.asarray(x, dtype=float) for x in (judge_unlabelled, judge_labelled, human_labelled))
    if fl.size != y.size:
        raise ValueError("one human label per labelled judge verdict")
    if y.size < MIN_LABELLED:
        raise ValueError(f"prediction-powered inference needs at least {MIN_LABELLED} labelled items, got {y.size}")
    n, big = y.size, fu.size
    if (clusters_labelled is None) != (clusters_unlabelled is None):
        raise ValueError("clusters for both the labelled and the unlabelled items, or for neither")
    labels = None if clusters_labelled is None else [*clusters_labelled, *clusters_unlabelled]
    codes = cluster_codes(labels, n + big)
    c = int(codes.max()) + 1
    g = np.concatenate([(y - y.mean()) / n, np.zeros(big)])
    h = np.concatenate([(fl - fl.mean()) / n, -(fu - fu.mean()) / big if big else np.zeros(0)])
    g_c, h_c = np.bincount(codes, weights=g, minlength=c), np.bincount(codes, weights=h, minlength=c)
    tuned = big > 0 and lam is None
    if not big:
        lam = 0.0  # everything labelled: the human mean itself
    elif lam is None:
        hh = float(np.sum(h_c**2))
        lam = float(np.clip(np.sum(g_c * h_c) / hh, 0.0, 1.0)) if hh > 0 else 0.0
    factor = c / (c - 1) if c > 1 else 0.0
    se = float(np.sqrt(factor * np.sum((g_c - lam * h_c) ** 2)))
    alone = float(np.sqrt(factor * np.sum(g_c**2)))
    est = float(y.mean() - lam * (fl.mean() - (fu.mean() if big else fl.mean())))
    df = max(1, len(set(codes[:n].tolist())) - 1 - tuned)  # a tuned λ is a slope fitted on those clusters
    from scipy.stats import t  # here, not at import: the listing commands import this module's neighbours

    q = float(t.ppf(1 - (1 - confidence) / 2, df))
    judge_all = float(np.concatenate([fu, fl]).mean())
    mean_y = float(y.mean())
    return PPIEstimate(
        est, est - q * se, est + q * se, judge_all, n, big, lam, se, df, (mean_y - q * alone, mean_y + q * alone)
    )
