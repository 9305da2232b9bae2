"""The statistics behind compare and promote, against hand-computed values and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.multiplicity import holm
from ragtrack.evaluation.power import multiplier, power_of
from ragtrack.evaluation.ppi import ppi_mean
from ragtrack.evaluation.stats import (
    clustered_se,
    compare_paired,
    expanded_tail,
    paired_bootstrap_ci,
    paired_permutation_p,
)

# ---------------------------------------------------------------- the paired bootstrap, against scipy


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_plain_interval_is_scipys_percentile_bootstrap_at_the_expanded_level(seed):
    """Each item its own cluster: the interval is scipy.stats.bootstrap's percentile interval of the mean,
    at Hesterberg's expanded level (up to Monte Carlo error of the two resamplings)."""
    rng = np.random.default_rng(seed)
    d = rng.integers(-2, 3, size=30) + rng.normal(0, 0.3, 30)
    tail = expanded_tail(0.95, d.size)
    theirs = sps.bootstrap(
        (d,), np.mean, n_resamples=40_000, method="percentile", confidence_level=1 - 2 * tail, random_state=seed
    ).confidence_interval
    low, high = paired_bootstrap_ci(d, resamples=40_000, seed=seed)
    width = theirs.high - theirs.low
    assert low == pytest.approx(theirs.low, abs=0.02 * width)
    assert high == pytest.approx(theirs.high, abs=0.02 * width)


def test_the_expanded_level_by_hand():
    # Φ⁻¹(α′/2) = √(C/(C−1)) · t_{C−1, 0.025}: for C = 16, t = −2.13145, × 1.03280 = −2.20136, Φ = 0.013856
    assert expanded_tail(0.95, 16) == pytest.approx(0.013856, abs=2e-6)
    assert expanded_tail(0.95, 10_000) == pytest.approx(0.025, abs=1e-4)  # many units: the plain percentile
    assert expanded_tail(0.95, 1) == pytest.approx(0.025)


def test_equal_clusters_resample_as_their_means():
    """Clusters of equal size: resampling clusters is the plain bootstrap of the cluster means (C units)."""
    rng = np.random.default_rng(4)
    cluster_means = rng.normal(0.2, 1, 12)
    d = np.repeat(cluster_means, 4) + np.tile([-0.3, 0.1, 0.0, 0.2], 12)  # each cluster's deviations sum to 0
    labels = np.repeat(np.arange(12), 4)
    tail = expanded_tail(0.95, 12)
    level = 1 - 2 * tail
    theirs = sps.bootstrap(
        (cluster_means,), np.mean, n_resamples=40_000, method="percentile", confidence_level=level, random_state=0
    ).confidence_interval
    low, high = paired_bootstrap_ci(d, resamples=40_000, clusters=list(labels))
    width = theirs.high - theirs.low
    assert low == pytest.approx(theirs.low, abs=0.02 * width) and high == pytest.approx(theirs.high, abs=0.02 * width)
    # and it is wider than pretending the 48 items were independent
    plain = paired_bootstrap_ci(d, resamples=40_000)
    assert high - low > 1.5 * (plain[1] - plain[0])


def test_clustered_standard_error_by_hand():
    d = [1.0, 0.0, 2.0, -1.0, 3.0]
    clusters = ["x", "x", "y", "y", "z"]
    # mean 1; residual sums per cluster: x (0 + -1) = -1, y (1 + -2) = -1, z 2 → Σu² = 6; √(3/2 · 6) / 5 = 0.6
    assert clustered_se(d, clusters) == pytest.approx(0.6)
    assert clustered_se(d) == pytest.approx(np.std(d, ddof=1) / math.sqrt(5))  # each its own: s / √n
    assert clustered_se([2.0]) == 0.0 and clustered_se([1.0, 2.0], ["a", "a"]) == 0.0


def test_the_sign_flip_test_flips_whole_clusters():
    d = [0.5, 0.5, 2.0, -0.5]
    clusters = ["a", "a", "b", "c"]  # cluster sums 1, 2, −0.5; observed |Σ| = 2.5
    # the 8 patterns: |±1 ±2 ±0.5| = 3.5, 2.5, 1.5, 0.5 (each twice): at least 2.5 → 4 of 8
    assert paired_permutation_p(d, clusters=clusters) == pytest.approx(4 / 8)
    assert paired_permutation_p(d) == pytest.approx(
        sum(abs(np.dot(s, d)) >= 2.5 - 1e-12 for s in np.array(np.meshgrid(*[[1, -1]] * 4)).T.reshape(-1, 4)) / 16
    )
    r = compare_paired([0, 0, 0, 0], d, clusters=clusters)
    assert r.clusters == 3 and r.units == 3 and not r.testable  # 2 / 2³ > 0.05: no test could mark it


def test_two_level_resampling_counts_the_judge_noise_once():
    """With K verdicts per item, resampling items *and* verdicts naively adds the judge noise twice; the
    shrunk two-level bootstrap keeps the variance of the item-level estimate, and widens only for what
    the verdicts really add."""
    rng = np.random.default_rng(5)
    n, k = 60, 4
    quality = rng.normal(0, 0.5, n)
    a = np.clip(np.rint(3 + rng.normal(0, 1.0, (n, k))), 1, 5)
    b = np.clip(np.rint(3.3 + quality[:, None] + rng.normal(0, 1.0, (n, k))), 1, 5)
    samples = list(zip(a, b, strict=True))
    d = b.mean(axis=1) - a.mean(axis=1)
    top = paired_bootstrap_ci(d, resamples=20_000)
    two = paired_bootstrap_ci(d, resamples=20_000, samples=samples)
    assert (two[1] - two[0]) == pytest.approx(top[1] - top[0], rel=0.08)
    r = compare_paired(a.mean(axis=1), b.mean(axis=1), samples=samples)
    assert r.judge_samples == 4 and r.within_sd is not None
    within = np.mean([math.sqrt(x.var(ddof=1) / k + y.var(ddof=1) / k) for x, y in samples])
    assert r.within_sd == pytest.approx(within)
    once = compare_paired(a[:, 0], b[:, 0], samples=[([x], [y]) for x, y in zip(a[:, 0], b[:, 0], strict=True)])
    assert once.judge_samples == 1 and once.within_sd is None  # one verdict each: the plain interval


# ---------------------------------------------------------------- Holm, power, PPI by hand


def test_holm_by_hand():
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == [0.02] and holm([]) == []


def test_power_by_hand():
    assert multiplier() == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    p = power_of("correctness", 48, 0.1, delta=0.2)
    assert p.mde == pytest.approx(0.2801585, abs=1e-6)
    assert p.items_needed == math.ceil(48 * (0.2801585 / 0.2) ** 2) == 95
    assert p.detects(0.3) and not p.detects(-0.2)
    flat = power_of("groundedness", 48, 0.0, delta=0.2)  # every difference alike: the MDE is unknown, not 0
    assert not flat.estimable and flat.items_needed is None and not flat.detects(1.0)
    with pytest.raises(ValueError):
        power_of("correctness", 48, 0.1, delta=0)


def test_the_mde_is_detected_80_percent_of_the_time():
    """Simulated: a true Δ at the MDE of a known SE is significant in about 80 % of evals."""
    rng = np.random.default_rng(6)
    n, sd = 40, 1.0
    mde = power_of("x", n, sd / math.sqrt(n)).mde
    hits = sum(sps.ttest_1samp(rng.normal(mde, sd, n), 0).pvalue < 0.05 for _ in range(2_000))
    assert 0.74 < hits / 2_000 < 0.84  # t-test at n = 40 is a touch below the normal 80 %


def test_ppi_by_hand():
    # unlabelled judge scores 4, 4, 5, 3 (mean 4); labelled judge 5, 4 vs human 4, 4: rectifier 1, 0 (mean 0.5)
    est = ppi_mean([4, 4, 5, 3], [5, 4], [4, 4])
    assert est.estimate == pytest.approx(3.5) and est.judge_only == pytest.approx(25 / 6)
    se = math.sqrt(np.var([4, 4, 5, 3], ddof=1) / 4 + np.var([1, 0], ddof=1) / 2)
    assert est.ci_high - est.estimate == pytest.approx(sps.norm.ppf(0.975) * se)
    assert (est.labelled, est.unlabelled) == (2, 4)
    everything = ppi_mean([], [5, 4, 3], [4, 4, 2])  # all labelled: the human mean
    assert everything.estimate == pytest.approx(10 / 3)
    with pytest.raises(ValueError):
        ppi_mean([1, 2], [], [])


# ---------------------------------------------------------------- compare and promote use them


def records(scores: dict[str, tuple[float, float]], docs: dict[str, str], side: int) -> list:
    from ragtrack.records import ItemRecord, JudgeRecord

    out = []
    for item_id, pair in scores.items():
        s = pair[side]
        judges = {j: JudgeRecord(s, (s - 1) / 4, "") for j in ("correctness", "groundedness", "relevance")}
        retrieval = {"context_recall": s / 5, "reciprocal_rank": 1.0, "hit_rate": 1.0}
        gt = [f"{docs[item_id]}#section-{item_id}"]
        out.append(ItemRecord(item_id, "A" if int(item_id[1:]) % 2 else "B", "q", gt, "gt", "a", [], retrieval, judges))
    return out


def test_compare_clusters_by_document_names_the_primary_tests_and_holm_adjusts_the_rest():
    from ragtrack.evaluation.clustering import cluster_labels, describe
    from ragtrack.evaluation.compare import compare_records

    rng = np.random.default_rng(8)
    scores = {f"q{i}": (float(rng.integers(1, 6)), float(rng.integers(1, 6))) for i in range(24)}
    docs = {f"q{i}": f"doc{i // 4}.md" for i in range(24)}  # 6 documents of 4 items
    a, b = records(scores, docs, 0), records(scores, docs, 1)
    labels = cluster_labels(b)
    assert describe("document", labels) == "clustered by the GT document (first GT passage's): 6 clusters of 24 items"
    rows, _ = compare_records(a, b, clusters=labels)
    primary = {(r.metric, r.scope) for r in rows if r.primary}
    assert primary == {("correctness", "all"), ("groundedness", "all")}
    secondary = [r for r in rows if not r.primary]
    assert [r.p_adjusted for r in secondary] == pytest.approx(holm([r.diff.p_value for r in secondary]))
    assert all(r.diff.clusters == 6 for r in rows if r.scope == "all")
    correctness = next(r for r in rows if r.primary and r.metric == "correctness")
    d = [y - x for x, y in scores.values()]
    assert correctness.diff.p_value == pytest.approx(paired_permutation_p(d, clusters=list(docs.values())))
    assert correctness.diff.se == pytest.approx(clustered_se(d, list(docs.values())))
    unclustered, _ = compare_records(a, b, clusters=cluster_labels(b, "item"))
    assert next(r for r in unclustered if r.primary).diff.units == 24


def test_the_interval_gate_and_the_mde_warning():
    from ragtrack.evaluation.promotion import Champion, Rule, decide
    from ragtrack.evaluation.stats import PairedDifference
    from ragtrack.records import RunSummary

    def summary(version):
        return RunSummary(version, version, "g", "j", "0.5", False, version, {m.ITEMS: 40.0})

    champion = Champion("1", "v1", summary("v1"))
    small_gain = PairedDifference(40, 3.0, 3.1, 0.1, -0.05, 0.25, 0.2, clusters=20, se=0.075)
    grounded = PairedDifference(40, 4.0, 4.0, 0.0, -0.1, 0.1, 1.0, clusters=20, se=0.05)
    paired = {"correctness": small_gain, "groundedness": grounded}
    plain = decide(summary("v2"), champion, Rule(), paired)
    assert plain.promoted  # the spec's mean rule: Δ 0.1 > 0
    assert plain.figures["correctness_mde"] == pytest.approx(multiplier() * 0.075)
    [warning] = plain.warnings  # 0.1 < MDE 0.21
    assert "below the minimum detectable Δ 0.210" in warning
    gated = decide(summary("v2"), champion, Rule(require_interval=True), paired)
    assert not gated.promoted
    assert any("correctness interval does not clear the margin" in r for r in gated.reasons)
    assert any("groundedness interval does not clear the tolerance" in r for r in gated.reasons)
    clear = {"correctness": replace_ci(small_gain, 0.02), "groundedness": replace_ci(grounded, 0.0)}
    assert decide(summary("v2"), champion, Rule(require_interval=True), clear).promoted


def replace_ci(d, low):
    from dataclasses import replace

    return replace(d, ci_low=low)
