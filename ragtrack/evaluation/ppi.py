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
fitted to minimise the estimated variance, clipped to [0, 1] as ``ppi_py`` does.

A λ fitted on the same few labels is a regression slope, and the estimate is then
the intercept of a control-variate regression (Lavenberg & Welch 1981, "A perspective
on the use of control variables to increase the efficiency of Monte Carlo
simulations", *Management Science* 27:322–335): each cluster's labelled human sum
regressed on its judge gap (labelled minus unlabelled). Its variance is that
intercept's, not the minimised variance at λ̂, which is too small twice over: the
residuals were made small by the fit (they estimate the spread with C − 2 degrees
of freedom, not C − 1) and λ̂ itself varies (gap² · Var(λ̂)). So, with C the
clusters holding a labelled item, s² = Σ_c r_c² / (C − 2) and

    Var θ̂ = s² · (C − 1 + gap² / Σ_c h_c²),      t with C − 2 degrees of freedom

— with equal clusters exactly the regression's intercept interval (scipy's
``linregress``; ``tests/test_stats.py``). The minimised variance with one degree of
freedom taken off (what this replaced) covered 92.7–93.4 % with 8 clusters; this
covers 94–95 %. Paying for the fit can make the tuned interval wider than the
labels alone's (a judge that tracks the labels only a little, few clusters): then
λ is 0 and the figure is the labels' own, so the printed interval is **never wider
than the labels alone** (each with its own variance and degrees of freedom).

Three more choices keep the interval honest on a small golden set:

* **clustered** like compare's intervals: an item's labelled and unlabelled
  neighbours share its documents, so the variance is the cluster-robust one of the
  estimator's per-item contributions (labelled: (y − m_y − λ(f − m_f)) / n;
  unlabelled: λ (f − m_u) / N), each cluster's sum in each group weighed by CR2's
  1 / √(1 − its share of the group) as compare's (equal clusters: C / (C − 1)); each
  item its own cluster, it is ``ppi_py``'s variance with n − 1 and N − 1 for n and N;
* **t-based**, with (clusters holding a labelled item) − 1 degrees of freedom, one
  fewer when λ is fitted: the rectifier's spread is estimated from those few;
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
    labels_only: tuple[float, float] = (0.0, 0.0)  # the interval from the labels alone (their CR2 t interval)


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
    the labelled lists pair up. ``lam`` fixes λ (1: plain PPI) instead of fitting it (no fit: C − 1
    degrees of freedom); clusters, one label per item of each list (None: each item its own)."""
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
    lab, unl = codes[:n], codes[n:]
    g = _cr2_sums(lab, (y - y.mean()) / n, c)
    h = _cr2_sums(lab, (fl - fl.mean()) / n, c)
    if big:
        h = h - _cr2_sums(unl, (fu - fu.mean()) / big, c)
    held = len(set(lab.tolist()))  # clusters holding a labelled item: the rectifier's spread comes from them
    gap = float(fl.mean() - fu.mean()) if big else 0.0  # the judge's labelled-minus-unlabelled mean
    from scipy.stats import t  # here, not at import: the listing commands import this module's neighbours

    def quantile(df: int) -> float:
        return float(t.ppf(1 - (1 - confidence) / 2, df))

    alone_se, alone_df = float(np.sqrt(np.sum(g**2))), max(1, held - 1)
    hh = float(np.sum(h**2))
    if not big:
        lam = 0.0  # everything labelled: the human mean itself
    if lam is not None:
        se, df = float(np.sqrt(np.sum((g - lam * h) ** 2))), alone_df
    else:
        lam, se, df = 0.0, alone_se, alone_df
        if held > 2 and hh > 0:  # a slope and a mean fitted on the labelled clusters: three at least
            slope = float(np.clip(np.sum(g * h) / hh, 0.0, 1.0))
            residual = float(np.sum((g - slope * h) ** 2)) / (held - 2)
            tuned_se = float(np.sqrt(residual * (held - 1 + gap**2 / hh)))
            if quantile(held - 2) * tuned_se < quantile(alone_df) * alone_se:
                lam, se, df = slope, tuned_se, held - 2
    est = float(y.mean() - lam * gap)
    q, alone = quantile(df), quantile(alone_df) * alone_se
    judge_all = float(np.concatenate([fu, fl]).mean())
    mean_y = float(y.mean())
    return PPIEstimate(
        est, est - q * se, est + q * se, judge_all, n, big, lam, se, df, (mean_y - alone, mean_y + alone)
    )


def _cr2_sums(codes: np.ndarray, contributions: np.ndarray, c: int) -> np.ndarray:
    """Each cluster's summed contribution to one group's mean over √(1 − its share of the group's items):
    the CR2 leverage correction compare's intervals use (:func:`ragtrack.evaluation.stats.clustered_se`),
    so the squared sums estimate the variance without bias (each item its own cluster: the variance with
    n − 1). A cluster holding the whole group has a centred sum of 0 and is left as it is."""
    sums = np.bincount(codes, weights=contributions, minlength=c)
    share = np.bincount(codes, minlength=c) / codes.size
    return sums / np.sqrt(np.where(share < 1, 1 - share, 1.0))
