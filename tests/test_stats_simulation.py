"""The statistics checked by simulation (ragtrack.testing.stats_simulation), with fewer runs than the
benchmark (benchmarks/stats_simulation.py prints 1 000 per figure).

The runs are seeded, so each count is fixed; the bounds say what a count must be for the claim to
stand. A coverage count of S printed intervals must be consistent with a true coverage somewhere in
93–97 %: it may not fall below the 0.05th percentile of Binomial(S, 0.93) nor above the 99.95th of
Binomial(S, 0.97) (a 0.1 % two-sided test against the whole band). A rate claimed to be ≤ 5 % may not
exceed the 99.9th percentile of Binomial(S, 0.05); one claimed ≥ 80 % not fall below the 0.1th of
Binomial(S, 0.80); one claimed in 75–85 % must be consistent with that band alike.
"""

from __future__ import annotations

import pytest
from scipy.stats import binom

from ragtrack.testing import stats_simulation as sim


def band(runs: int, low: float, high: float) -> tuple[int, int]:
    return int(binom.ppf(0.0005, runs, low)), int(binom.isf(0.0005, runs, high))


def at_most_five_percent(runs: int) -> int:
    return int(binom.isf(0.001, runs, 0.05))


@pytest.mark.parametrize("kind", list(sim.KINDS))
def test_printed_95_percent_intervals_cover_the_true_delta(kind):
    runs = 300
    printed, covered = sim.coverage(kind, runs, seed=1)
    low, high = band(printed, 0.93, 0.97)
    assert printed > runs * 0.9, f"{kind}: only {printed} of {runs} evals printed an interval"
    assert low <= covered <= high, f"{kind}: {covered}/{printed} outside [{low}, {high}]"


def test_items_on_two_documents_need_connected_clusters():
    """The reason for connected components: the same evals clustered by each item alone undercover
    (84 % of 400 when written), by the first document only less well than by shared documents."""
    runs = 400
    kind = "half the items on two documents"
    _, plain = sim.coverage(kind, runs, seed=1, by="item")
    _, first = sim.coverage(kind, runs, seed=1, by="first")
    _, connected = sim.coverage(kind, runs, seed=1)
    assert plain / runs < 0.90 and plain < first < connected


def test_tuned_ppi_is_never_wider_than_the_labels_alone():
    wider, plain, tuned = sim.ppi_widths(150, seed=1)
    assert wider == 0 and tuned <= 1.0
    assert plain > 1.3  # plain PPI with this judge: the labels alone would have been better


def test_holm_keeps_the_family_wise_error_at_five_percent():
    runs = 120
    raw, adjusted = sim.family_false_positives(runs, seed=1)
    assert adjusted <= at_most_five_percent(runs)
    assert raw > runs / 5  # uncorrected, dozens of tests "find" something far more often


@pytest.mark.parametrize("design", list(sim.GATE_DESIGNS))
def test_the_mde_means_80_percent_and_the_gate_keeps_its_promises(design):
    """At a true Δ equal to the printed MDE the correctness test detects 75–85 %; the interval gate
    promotes a null challenger ≤ 5 %; at twice the MDE the correctness test detects ≥ 80 % and the gate
    promotes as often as the groundedness non-inferiority power the decisions printed says (groundedness
    truly unchanged, the default tolerance 0.5): ≥ 80 % where that power is (independent items, 16
    clusters), 78 % where it is not (8 clusters: the tolerance is about groundedness's own MDE there),
    and ≥ 80 % in every design among the decisions that printed a power of 80 % or more."""
    d = sim.GATE_DESIGNS[design]
    runs = 200
    mde = sim.printed_mde(d, runs=100)
    detected = sim.gate_promotions(runs, True, seed=1, design=d, gain=mde).detected
    low, high = band(runs, 0.75, 0.85)
    assert low <= detected <= high, f"{design}: {detected}/{runs} at the MDE {mde:.3f}"
    null = sim.gate_promotions(runs, True, seed=2, design=d).promoted
    assert null <= at_most_five_percent(runs)
    twice = sim.gate_promotions(runs, True, seed=3, design=d, gain=2 * mde)
    assert twice.detected >= int(binom.ppf(0.001, runs, 0.80))
    expected = twice.power * twice.detected / runs  # both tests must pass; they are independent here
    low, high = binom.ppf(0.0005, runs, expected), binom.isf(0.0005, runs, expected)
    assert low <= twice.promoted <= high, (twice.promoted, expected)
    if twice.power >= 0.85:
        assert twice.promoted >= int(binom.ppf(0.001, runs, 0.80)), (
            f"{design}: {twice.promoted}/{runs} at twice the MDE"
        )
    # Where the decision printed a non-inferiority power of 80 % or more, the gate keeps the promise.
    assert twice.powered > runs / 4
    assert twice.promoted_powered >= int(binom.ppf(0.001, twice.powered, 0.80)), (twice.promoted_powered, twice.powered)


def test_the_mean_rule_promotes_about_a_quarter_of_null_challengers():
    promoted = sim.gate_promotions(60, require_interval=False, seed=1).promoted
    assert promoted > 6  # a null correctness Δ above 0 and a null groundedness Δ not below it
