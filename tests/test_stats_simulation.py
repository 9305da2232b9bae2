"""The statistics checked by simulation (ragtrack.testing.stats_simulation), with fewer runs than the
benchmark (benchmarks/stats_simulation.py prints 1 000 per figure).

The runs are seeded, so each count is fixed; the bounds say what a count must be for the claim to
stand. A coverage count of S runs must be consistent with a true coverage somewhere in 93–97 %: it
may not fall below the 0.05th percentile of Binomial(S, 0.93) nor above the 99.95th of
Binomial(S, 0.97) (a 0.1 % two-sided test against the whole band). A rate claimed to be ≤ 5 % may not
exceed the 99.9th percentile of Binomial(S, 0.05).
"""

from __future__ import annotations

import pytest
from scipy.stats import binom

from ragtrack.testing import stats_simulation as sim


def coverage_band(runs: int) -> tuple[int, int]:
    return int(binom.ppf(0.0005, runs, 0.93)), int(binom.isf(0.0005, runs, 0.97))


def at_most_five_percent(runs: int) -> int:
    return int(binom.isf(0.001, runs, 0.05))


@pytest.mark.parametrize(
    ("kind", "runs"),
    [("paired bootstrap", 400), ("clustered bootstrap", 400), ("two-level (3 judge samples)", 150),
     ("prediction-powered Δ", 400)],
)  # fmt: skip
def test_95_percent_intervals_cover_the_true_delta(kind, runs):
    low, high = coverage_band(runs)
    covered = sim.coverage(kind, runs, resamples=1_000, seed=1)
    assert low <= covered <= high, f"{kind}: {covered}/{runs} outside [{low}, {high}]"


def test_ignoring_documents_undercovers_on_clustered_data():
    """The reason for clustering: the same clustered evals, with each item treated as independent."""
    runs = 400
    plain = sim.coverage("paired bootstrap", runs, 1_000, seed=1, design=sim.KINDS["clustered bootstrap"])
    clustered = sim.coverage("clustered bootstrap", runs, 1_000, seed=1)
    assert plain / runs < 0.92 and clustered - plain > 10  # 357 vs 377 of 400 when written


def test_holm_keeps_the_family_wise_error_at_five_percent():
    runs = 120
    raw, adjusted = sim.family_false_positives(runs, seed=1)
    assert adjusted <= at_most_five_percent(runs)
    assert raw > runs / 5  # uncorrected, dozens of tests "find" something far more often


def test_the_interval_gate_rarely_promotes_a_challenger_with_no_gain():
    runs = 300
    assert sim.gate_promotions(runs, require_interval=True, seed=1, resamples=1_000) <= at_most_five_percent(runs)
    # the mean rule: about a quarter (a null correctness Δ above 0 and a null groundedness Δ not below it)
    assert sim.gate_promotions(60, require_interval=False, seed=1, resamples=500) > 6
