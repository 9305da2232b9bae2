"""Prediction-powered inference: a judge's many verdicts, corrected by a few human labels.

A judge scores every item; a person labels a few. The judge-only mean is precise
but biased (a lenient judge overrates every answer); the human-only mean is
unbiased but noisy (few labels). Prediction-powered inference (Angelopoulos,
Bates, Fannjiang, Jordan & Zrnic 2023, "Prediction-powered inference",
*Science* 382:669–674) combines them: the judge mean over the unlabelled items,
minus the judge's average error on the labelled ones (the *rectifier*):

    θ̂ = mean_unlabelled(f) − mean_labelled(f − y)
    SE² = var(f) / N_unlabelled + var(f − y) / n_labelled

θ̂ is unbiased for the mean *human* score whatever the judge's bias, and its
interval θ̂ ± z·SE is valid when the labelled items are a random subset; it is
narrower than the human-only one when the judge tracks the labels. For a paired
Δ between two versions, f and y are per-item differences (B − A), on items both
versions' answers were labelled on. ARES (Saad-Falcon et al. 2024) uses the same
estimator unpaired, for one system at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True)
class PPIEstimate:
    estimate: float
    ci_low: float
    ci_high: float
    judge_only: float  # the plain mean of the judge over every item
    labelled: int
    unlabelled: int


def ppi_mean(
    judge_unlabelled: Sequence[float],
    judge_labelled: Sequence[float],
    human_labelled: Sequence[float],
    confidence: float = 0.95,
) -> PPIEstimate:
    """The prediction-powered mean and interval (see the module docstring); the labelled lists pair up."""
    f, fl, y = (list(map(float, x)) for x in (judge_unlabelled, judge_labelled, human_labelled))
    if len(fl) != len(y):
        raise ValueError("one human label per labelled judge verdict")
    if not y:
        raise ValueError("prediction-powered inference needs at least one labelled item")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    rectifier = [a - b for a, b in zip(fl, y, strict=True)]
    judge_all = _mean(f + fl)
    if not f:  # everything labelled: the human mean itself
        est, se = _mean(y), math.sqrt(_var(y) / len(y))
    else:
        est = _mean(f) - _mean(rectifier)
        se = math.sqrt(_var(f) / len(f) + _var(rectifier) / len(rectifier))
    return PPIEstimate(est, est - z * se, est + z * se, judge_all, len(y), len(f))


def _mean(x: list[float]) -> float:
    return sum(x) / len(x)


def _var(x: list[float]) -> float:
    """Sample variance (ddof 1); 0 for one value."""
    if len(x) < 2:
        return 0.0
    m = _mean(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)
