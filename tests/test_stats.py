"""The statistics behind compare and promote, against hand-computed values, scipy and ppi_py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.clustering import components
from ragtrack.evaluation.multiplicity import holm
from ragtrack.evaluation.power import detection_power, multiplier, power_of
from ragtrack.evaluation.ppi import MIN_LABELLED, ppi_mean
from ragtrack.evaluation.stats import (
    PairedDifference,
    between_share,
    clustered_se,
    compare_paired,
    paired_permutation_p,
    t_interval,
)

# ---------------------------------------------------------------- the clustered t interval


def test_the_plain_interval_is_scipys_one_sample_t_interval():
    rng = np.random.default_rng(1)
    d = rng.integers(-2, 3, size=30) + rng.normal(0, 0.3, 30)
    theirs = sps.ttest_1samp(d, 0).confidence_interval(0.95)
    assert t_interval(d) == pytest.approx((theirs.low, theirs.high))


def test_equal_clusters_are_the_t_interval_of_the_cluster_means():
    """Clusters of equal size: the CR2 SE is the CR1 one, and the interval is the t interval of the C
    cluster means (C − 1 df) — wider than pretending the 48 items were independent."""
    rng = np.random.default_rng(4)
    cluster_means = rng.normal(0.2, 1, 12)
    d = np.repeat(cluster_means, 4) + np.tile([-0.3, 0.1, 0.0, 0.2], 12)  # each cluster's deviations sum to 0
    labels = list(np.repeat(np.arange(12), 4))
    theirs = sps.ttest_1samp(cluster_means, 0).confidence_interval(0.95)
    assert t_interval(d, labels) == pytest.approx((theirs.low, theirs.high))
    plain = t_interval(d)
    assert t_interval(d, labels)[1] - t_interval(d, labels)[0] > 1.5 * (plain[1] - plain[0])


def test_clustered_standard_error_by_hand():
    d = [1.0, 0.0, 2.0, -1.0, 3.0]
    clusters = ["x", "x", "y", "y", "z"]
    # mean 1; residual sums per cluster: x (0 + -1) = -1, y (1 + -2) = -1, z 2; sizes 2, 2, 1 of 5:
    # CR2 weights 1/(1 − 2/5) = 5/3, 5/3, 1/(1 − 1/5) = 5/4 → 5/3 + 5/3 + 4·5/4 = 25/3; √(25/3) / 5
    assert clustered_se(d, clusters) == pytest.approx(math.sqrt(25 / 3) / 5)
    assert clustered_se(d) == pytest.approx(np.std(d, ddof=1) / math.sqrt(5))  # each its own: s / √n
    assert clustered_se([2.0]) == 0.0 and clustered_se([1.0, 2.0], ["a", "a"]) == 0.0
    # equal clusters: the CR1 factor C/(C−1) of Miller (2024), eq. 4: √(3/2 · Σu²) / N
    equal = [1.0, 3.0, 0.0, 0.0, 5.0, 3.0]
    u = [1 + 3 - 4, 0 + 0 - 4, 5 + 3 - 4]
    assert clustered_se(equal, ["a", "a", "b", "b", "c", "c"]) == pytest.approx(
        math.sqrt(1.5 * sum(x * x for x in u)) / 6
    )


def test_bell_mccaffrey_degrees_of_freedom():
    from ragtrack.evaluation.stats import degrees_of_freedom

    assert degrees_of_freedom(None, 48) == pytest.approx(47)  # items: n − 1
    assert degrees_of_freedom(list(range(16)) * 3, 48) == pytest.approx(15)  # equal clusters: C − 1
    # sizes 3, 1, 1 of 5: B = diag(1/(1 − n_c/5)) (diag(n) − n nᵀ/5) = [[3.0, −1.5, −1.5], [−0.75, 1, −0.25],
    # [−0.75, −0.25, 1]]: tr B = 5; diagonal of B²: 9 + 2·1.125 = 11.25, 1.125 + 1 + 0.0625 = 2.1875 twice
    # → tr B² = 15.625, df = 25 / 15.625 = 1.6 (not C − 1 = 2: one cluster holds most of the set)
    assert degrees_of_freedom(["a", "a", "a", "b", "c"], 5) == pytest.approx(1.6)
    assert degrees_of_freedom(["a", "a"], 2) == 0.0


def test_no_variation_is_no_interval():
    r = compare_paired([5.0] * 12, [5.0] * 12)
    assert not r.varies and r.no_variation == "no variation in 12 items — not evidence"
    assert r.interval_text() == "no variation in 12 items — not evidence" and not r.significant
    shifted = compare_paired([3.0] * 12, [4.0] * 12)  # every difference +1: still no spread to go on
    assert not shifted.varies and not shifted.excludes_zero
    one = compare_paired([1.0, 2.0, 3.0], [2.0, 2.0, 5.0], clusters=["a", "a", "a"])
    assert one.no_variation == "one cluster of 3 items — no interval"


def test_the_sign_flip_test_flips_whole_clusters():
    d = [0.5, 0.5, 2.0, -0.5]
    clusters = ["a", "a", "b", "c"]  # cluster sums 1, 2, −0.5; observed |Σ| = 2.5
    # the 8 patterns: |±1 ±2 ±0.5| = 3.5, 2.5, 1.5, 0.5 (each twice): at least 2.5 → 4 of 8
    assert paired_permutation_p(d, clusters=clusters) == pytest.approx(4 / 8)
    assert paired_permutation_p(d) == pytest.approx(
        sum(abs(np.dot(s, d)) >= 2.5 - 1e-12 for s in np.array(np.meshgrid(*[[1, -1]] * 4)).T.reshape(-1, 4)) / 16
    )
    r = compare_paired([0, 0, 0, 0], d, clusters=clusters)
    assert r.clusters == 3 and r.units == 3 and r.largest == 2 and not r.testable  # 2 / 2³ > 0.05


def test_judge_samples_report_the_judges_noise():
    rng = np.random.default_rng(5)
    n, k = 60, 4
    a = np.clip(np.rint(3 + rng.normal(0, 1.0, (n, k))), 1, 5)
    b = np.clip(np.rint(3.3 + rng.normal(0, 1.0, (n, k))), 1, 5)
    samples = list(zip(a, b, strict=True))
    r = compare_paired(a.mean(axis=1), b.mean(axis=1), samples=samples)
    assert r.judge_samples == 4
    within = np.mean([math.sqrt(x.var(ddof=1) / k + y.var(ddof=1) / k) for x, y in samples])
    assert r.within_sd == pytest.approx(within)
    assert (r.ci_low, r.ci_high) == pytest.approx(t_interval(b.mean(axis=1) - a.mean(axis=1)))
    once = compare_paired(a[:, 0], b[:, 0], samples=[([x], [y]) for x, y in zip(a[:, 0], b[:, 0], strict=True)])
    assert once.judge_samples == 1 and once.within_sd is None


def test_between_share_by_hand():
    # clusters of 2: means 0, 2, 4 (grand 2); within residuals ±1 → MSW = 6/3 = 2; MSB = 2·(4+0+4)/2 = 8;
    # n0 = 2; σ_b² = (8 − 2)/2 = 3; shares: Σn_c² σ_b² = 12·3 = 36 vs N·σ_w² = 6·2 = 12 → 36/48
    d = [-1.0, 1.0, 1.0, 3.0, 3.0, 5.0]
    assert between_share(d, ["a", "a", "b", "b", "c", "c"]) == pytest.approx(0.75)
    assert between_share(d) == 0.0


def test_connected_components_of_shared_documents():
    # 0–1 share d1, 1–2 share d2, 3 alone, 4 shares d5 with 5; 6 has none
    groups = [{"d0", "d1"}, {"d1", "d2"}, {"d2"}, {"d3"}, {"d4", "d5"}, {"d5"}, set()]
    assert components(groups) == [0, 0, 0, 1, 2, 2, 3]
    assert components([{"b"}, {"a"}, {"a", "b"}]) == [0, 0, 0]  # joined late, still one


# ---------------------------------------------------------------- Holm, power, PPI


def test_holm_by_hand():
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == [0.02] and holm([]) == []


def diff(n=48, clusters=16, se=0.1, between=0.0):
    return PairedDifference(n, 3.0, 3.1, 0.1, -0.1, 0.3, 0.2, clusters=clusters, se=se, between=between)


def test_power_by_hand():
    # t_{15, 0.975} = 2.131450, t_{15, 0.80} = 0.866245 → 2.997695
    assert multiplier(15) == pytest.approx(2.997695, abs=1e-5)
    assert multiplier(10_000) == pytest.approx(1.959964 + 0.841621, abs=1e-3)  # many clusters: the z form
    p = power_of("correctness", diff(), delta=0.2)
    assert p.mde == pytest.approx(0.2997695, abs=1e-6)
    # new documents: 48 · (M(C′−1) · 0.1 / 0.2)² with C′ = 16 · N/48 clusters: N = 108 → C′ 36, M 2.876
    n_new = p.items_new_documents
    assert n_new == math.ceil(48 * (multiplier(math.ceil(16 * n_new / 48) - 1) * 0.1 / 0.2) ** 2)
    assert 100 < n_new < 115
    # no between-cluster variance: new items on these documents are as good (at this C's multiplier)
    assert p.items_same_documents == math.ceil(48 / (0.2 / 0.2997695) ** 2)
    half = power_of("correctness", diff(between=0.5), delta=0.2)  # half the variance between documents
    target = (0.2 / 0.2997695) ** 2  # 0.445 < 0.5: the floor of these 16 documents is above it
    assert target < 0.5 and half.items_same_documents is None
    reachable = power_of("correctness", diff(between=0.2), delta=0.2)
    assert reachable.items_same_documents == math.ceil(48 * 0.8 / (target - 0.2))
    assert p.detects(0.3) and not p.detects(-0.2)
    with pytest.raises(ValueError):
        power_of("correctness", diff(), delta=0)


def test_no_mde_where_no_test_is_possible():
    few = power_of("correctness", diff(n=48, clusters=5))
    assert few.mde is None and few.reason == "5 clusters: too few for any test at 5% (a sign-flip test needs 6)"
    flat = power_of("groundedness", diff(se=0.0))
    assert flat.mde is None and flat.reason == "no variation in 48 items — not evidence" and not flat.detects(1.0)


def test_detection_power_is_the_noncentral_t():
    """At the MDE the one-sided t test detects about 80 % (simulated with scipy's t-test)."""
    rng = np.random.default_rng(6)
    n, sd = 16, 1.0
    mde = multiplier(n - 1) * sd / math.sqrt(n)
    assert detection_power(mde, sd / math.sqrt(n), n - 1) == pytest.approx(0.80, abs=0.02)
    hits = sum(sps.ttest_1samp(rng.normal(mde, sd, n), 0, alternative="greater").pvalue < 0.025 for _ in range(2_000))
    assert 0.75 < hits / 2_000 < 0.85


def ppi_data(seed=3, n=30, big=200):
    rng = np.random.default_rng(seed)
    y = rng.integers(1, 6, n).astype(float)
    f = np.clip(y + rng.normal(0.5, 1.0, n), 1, 5)
    fu = np.clip(rng.integers(1, 6, big) + rng.normal(0.5, 1.0, big), 1, 5)
    return fu, f, y


def test_ppi_against_ppi_py():
    """The authors' ppi_py: the same point estimate at a given λ, the same untuned variance up to each
    group's n − 1 (theirs divides both the rectifier's and the unlabelled judge's variance by n and N;
    our CR2 sums, each item its own cluster, by n − 1 and N − 1), and nearly the same tuned λ."""
    ppi_py = pytest.importorskip("ppi_py")
    fu, f, y = ppi_data()
    n, big = len(y), len(fu)
    for lam in (1.0, 0.6):
        ours = ppi_mean(fu, f, y, lam=lam)
        assert ours.estimate == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, f, fu, lam=lam)[0]))
        low, high = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05, lam=lam)
        theirs = (float(high[0]) - float(low[0])) / 2 / sps.norm.ppf(0.975)
        rectifier, judge = np.var(y - lam * f) / n, np.var(lam * fu) / big
        assert theirs**2 == pytest.approx(rectifier + judge)
        assert ours.se**2 == pytest.approx(rectifier * n / (n - 1) + judge * big / (big - 1))
        assert ours.ci_high - ours.estimate == pytest.approx(sps.t.ppf(0.975, n - 1) * ours.se)
    tuned = ppi_mean(fu, f, y)
    theirs = ppi_py.ppi_mean_pointestimate(y, f, fu)
    assert tuned.estimate == pytest.approx(float(theirs[0]), abs=0.05)
    assert tuned.df == n - 2  # one df for the fitted λ


def test_ppi_is_never_wider_than_the_labels_alone():
    """A judge unrelated to the labels: plain PPI is wider than the labels alone; the tuned one is not,
    and the labels alone's interval is the one-sample t interval of the labels (scipy's)."""
    rng = np.random.default_rng(9)
    y = rng.integers(1, 6, 20).astype(float)
    f, fu = rng.integers(1, 6, 20).astype(float), rng.integers(1, 6, 40).astype(float)
    plain, tuned = ppi_mean(fu, f, y, lam=1.0), ppi_mean(fu, f, y)
    alone = tuned.labels_only[1] - tuned.labels_only[0]
    assert plain.se > tuned.se and tuned.ci_high - tuned.ci_low <= alone + 1e-12
    assert 0 <= tuned.lam < 0.5
    theirs = sps.ttest_1samp(y, 0).confidence_interval(0.95)
    assert tuned.labels_only == pytest.approx((theirs.low, theirs.high))


def test_tuned_ppi_is_a_control_variate_regression_over_clusters():
    """With λ fitted on the same clusters, the estimate is C times the intercept of the clusters' labelled
    human sums regressed on their judge gaps (equal clusters: 3 labelled and 3 unlabelled items each),
    and its interval that regression's: the intercept's standard error (scipy's linregress: residuals
    over C − 2, the slope's own spread included) and t with C − 2 degrees of freedom."""
    rng = np.random.default_rng(1)
    c, per = 8, 3
    truth = np.repeat(rng.normal(0, 0.3, c), per) + rng.normal(0, 0.8, c * per)
    y = np.rint(3 + truth)
    f = np.rint(3.4 + truth + rng.normal(0, 0.3, c * per))
    fu = np.rint(3.4 + np.repeat(rng.normal(0, 0.3, c), per) + rng.normal(0, 0.8, c * per))
    where = np.repeat(np.arange(c), per)
    est = ppi_mean(fu, f, y, clusters_unlabelled=where, clusters_labelled=where)
    n = y.size
    sums = np.bincount(where, weights=y / n)
    gaps = np.bincount(where, weights=f / n) - np.bincount(where, weights=fu / n)
    fit = sps.linregress(gaps, sums)
    assert 0 < est.lam < 1 and est.lam == pytest.approx(fit.slope)
    assert est.estimate == pytest.approx(c * fit.intercept)
    assert est.df == c - 2 and est.se == pytest.approx(c * fit.intercept_stderr)
    assert est.ci_high - est.estimate == pytest.approx(sps.t.ppf(0.975, c - 2) * est.se)
    assert est.ci_high - est.ci_low < est.labels_only[1] - est.labels_only[0]


def test_ppi_clusters_and_minimum_labels():
    fu, f, y = ppi_data(n=12, big=24)
    lab, unl = [f"d{i % 4}" for i in range(12)], [f"d{i % 4}" for i in range(24)]
    clustered = ppi_mean(fu, f, y, clusters_unlabelled=unl, clusters_labelled=lab, lam=1.0)
    assert clustered.df == 3  # four clusters hold labels
    everything = ppi_mean([], f, y)  # all labelled: the human mean
    assert everything.estimate == pytest.approx(float(np.mean(y))) and everything.lam == 0
    with pytest.raises(ValueError, match=f"at least {MIN_LABELLED} labelled"):
        ppi_mean([1, 2], [3] * (MIN_LABELLED - 1), [3] * (MIN_LABELLED - 1))


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
    assert describe("document", labels) == (
        "clustered by GT documents shared (any in common: one cluster): 6 clusters of 24 items, the largest 4"
    )
    rows, _ = compare_records(a, b, clusters=labels)
    primary = {(r.metric, r.scope) for r in rows if r.primary}
    assert primary == {("correctness", "all"), ("groundedness", "all")}
    assert [r.p_adjusted for r in rows] == pytest.approx(holm([r.diff.p_value for r in rows]))  # one family
    assert all(r.diff.clusters == 6 for r in rows if r.scope == "all")
    correctness = next(r for r in rows if r.primary and r.metric == "correctness")
    d = [y - x for x, y in scores.values()]
    assert correctness.diff.p_value == pytest.approx(paired_permutation_p(d, clusters=list(docs.values())))
    assert correctness.diff.se == pytest.approx(clustered_se(d, list(docs.values())))
    unclustered, _ = compare_records(a, b, clusters=cluster_labels(b, "item"))
    assert next(r for r in unclustered if r.primary).diff.units == 24


def test_the_interval_gate_and_the_mde_warning():
    from dataclasses import replace

    from ragtrack.errors import RagtrackError
    from ragtrack.evaluation.promotion import NONINFERIORITY_TOLERANCE, Champion, Rule, decide
    from ragtrack.records import RunSummary

    def summary(version):
        return RunSummary(version, version, "g", "j", "0.5", False, version, {m.ITEMS: 40.0})

    champion = Champion("1", "v1", summary("v1"))
    small_gain = PairedDifference(40, 3.0, 3.1, 0.1, -0.05, 0.25, 0.2, clusters=20, se=0.075)
    grounded = PairedDifference(40, 4.0, 4.0, 0.0, -0.6, 0.1, 1.0, clusters=20, se=0.05)
    paired = {"correctness": small_gain, "groundedness": grounded}
    plain = decide(summary("v2"), champion, Rule(), paired)
    assert plain.promoted  # the spec's mean rule: Δ 0.1 > 0
    assert plain.figures["correctness_mde"] == pytest.approx(multiplier(19) * 0.075)
    [warning] = plain.warnings  # 0.1 < MDE 0.22
    assert f"below the minimum detectable Δ {multiplier(19) * 0.075:.3f}" in warning
    gated = decide(summary("v2"), champion, Rule(require_interval=True), paired)
    assert not gated.promoted and gated.figures["groundedness_tolerance"] == NONINFERIORITY_TOLERANCE
    assert any("correctness interval does not show superiority" in r for r in gated.reasons)
    assert any("groundedness interval does not show non-inferiority" in r for r in gated.reasons)
    assert gated.figures["groundedness_power"] == pytest.approx(detection_power(0.5, 0.05, 19))
    clear = {"correctness": replace(small_gain, ci_low=0.02), "groundedness": replace(grounded, ci_low=-0.4)}
    assert decide(summary("v2"), champion, Rule(require_interval=True), clear).promoted
    # groundedness constant on every item: not evidence of non-inferiority, and no interval in the figures
    flat = {**clear, "groundedness": PairedDifference(40, 5.0, 5.0, 0.0, 0.0, 0.0, 1.0, clusters=20)}
    refused = decide(summary("v2"), champion, Rule(require_interval=True), flat)
    assert not refused.promoted and "groundedness_ci_low" not in refused.figures
    assert "groundedness: no variation in 40 items — not evidence; the interval gate cannot clear it" in refused.reasons
    # five clusters: no test at 5 % is possible, so the gate cannot pass and no MDE is printed
    few = {k: replace(v, clusters=5) for k, v in clear.items()}
    refused = decide(summary("v2"), champion, Rule(require_interval=True), few)
    assert not refused.promoted and "correctness_mde" not in refused.figures
    assert any("5 clusters: too few for any test at 5%" in r for r in refused.reasons)
    with pytest.raises(RagtrackError, match="non-inferiority: its tolerance must be above 0"):
        Rule(require_interval=True, tolerance=0)
