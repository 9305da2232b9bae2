"""Retrieval metrics against values computed by hand, and against trec_eval."""

import math

import pytest

from ragtrack.evaluation.retrieval_metrics import (
    all_hit,
    all_hops_at_k,
    context_precision,
    context_recall,
    hit_rate,
    mean,
    ndcg_at_k,
    passages_of,
    precision_at_k,
    reciprocal_rank,
    relevant_units,
)

GT = ["g1", "g2"]


def one_each(*ids):
    """Units of one passage each (a per-passage retriever): the textbook case."""
    return [[pid] for pid in ids]


def test_perfect_retrieval():
    units = one_each("g1", "g2")
    assert context_recall(units, GT) == 1.0
    assert context_precision(units, GT) == 1.0
    assert reciprocal_rank(units, GT) == 1.0
    assert ndcg_at_k(units, GT, 5) == pytest.approx(1.0)


def test_partial_retrieval_hand_computed():
    units = one_each("x", "g2", "y", "z")
    assert context_recall(units, GT) == 0.5  # 1 of 2 GT found
    assert context_precision(units, GT) == 0.25  # 1 of 4 retrieved is GT
    assert reciprocal_rank(units, GT) == 0.5  # first GT at rank 2
    assert hit_rate(units, GT) == 1.0
    # DCG = 1/log2(3); ideal: the relevant unit plus one for the missing g1 → 1 + 1/log2(3)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(units, GT, 4) == pytest.approx(expected)


def test_empty_retrieval_scores_zero_not_nan():
    for fn in (context_recall, context_precision, reciprocal_rank, hit_rate):
        assert fn([], GT) == 0.0
    assert ndcg_at_k([], GT, 5) == 0.0
    assert ndcg_at_k([[], []], GT, 5) == 0.0  # units that map to no passage


def test_gt_never_retrieved():
    units = one_each("a", "b", "c")
    assert context_recall(units, GT) == 0.0
    assert context_precision(units, GT) == 0.0
    assert reciprocal_rank(units, GT) == 0.0
    assert hit_rate(units, GT) == 0.0
    assert ndcg_at_k(units, GT, 3) == 0.0


def test_a_passage_in_several_units_counts_once_at_its_first_unit():
    # Two windows over g1 (ranks 1 and 2), then x, then g2.
    units = [["g1"], ["g1"], ["x"], ["g2"]]
    assert passages_of(units) == ["g1", "x", "g2"]
    assert relevant_units(units, GT) == [True, False, False, True]  # the second g1 window adds nothing
    assert context_precision(units, GT) == pytest.approx(2 / 3)  # passages: g1, x, g2
    assert context_recall(units, GT) == 1.0
    assert reciprocal_rank([["x"], ["x"], ["g2"]], GT) == pytest.approx(1 / 3)  # units rank: the third one
    # DCG = 1 + 1/log2(5); ideal: 2 relevant units, nothing missing → 1 + 1/log2(3)
    assert ndcg_at_k(units, GT, 4) == pytest.approx((1 + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))


def test_a_large_unit_ranks_the_gt_passage_it_holds_at_its_own_rank():
    # A parent section covering 13 passages, the GT one eighth in document order: rank 1, not rank 8.
    parent = [f"s{i}" for i in range(7)] + ["g1"] + [f"s{i}" for i in range(7, 12)]
    units = [parent, ["y"], ["z"]]
    assert reciprocal_rank(units, ["g1"]) == 1.0
    assert ndcg_at_k(units, ["g1"], 3) == 1.0
    assert hit_rate(units, ["g1"]) == 1.0
    assert context_recall(units, ["g1"]) == 1.0
    assert context_precision(units, ["g1"]) == pytest.approx(1 / 15)  # precision still counts passages
    # One unit holding both GT passages is a perfect ranking...
    assert ndcg_at_k([["g1", "x", "g2"], ["y"]], GT, 2) == 1.0
    # ...one holding one of them, the other never retrieved, is not: the ideal has a unit for g2 too.
    assert ndcg_at_k([["g1", "x"], ["y"]], GT, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_ndcg_cuts_at_k_units():
    # GT at unit 3 is outside k=2.
    assert ndcg_at_k(one_each("a", "b", "g1"), GT, 2) == 0.0
    # single GT at rank 1 with |GT| = 1 is perfect
    assert ndcg_at_k(one_each("g1", "a"), ["g1"], 2) == 1.0
    # a relevant unit beyond k still counts in the ideal: DCG 1, ideal 1 + 1/log2(3)
    assert ndcg_at_k([["g1"], ["a"], ["g2"]], GT, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_all_hit_needs_every_group():
    groups = [["a", "b"], ["c"]]
    assert all_hit(["b", "c"], groups) == 1.0
    assert all_hit(["a", "b"], groups) == 0.0


def test_all_hops_counts_the_first_k_units():
    groups = [["a"], ["b"]]
    assert all_hops_at_k([["x", "a"], ["b"]], groups, 2) == 1.0
    assert all_hops_at_k([["x"], ["a"], ["b"]], groups, 2) == 0.0  # b is in unit 3
    assert all_hops_at_k([["a", "b", "x", "y"]], groups, 1) == 1.0  # one unit holds both hops


def test_mean_ignores_missing_and_is_none_when_empty():
    assert mean([1.0, None, 0.0]) == 0.5
    assert mean([]) is None
    assert mean([float("nan")]) is None


def test_metrics_agree_with_trec_eval_on_thousands_of_random_rankings():
    """Cross-check against an independent implementation: trec_eval (pytrec_eval, via ir-measures).

    Random rankings of units, each covering 0-3 passages of a small ID space, so units that
    share passages, units that map to nothing and empty retrievals occur often.

    * Rank metrics (RR, success, nDCG@k) rank units: trec_eval sees each unit as a document,
      relevant when it covers a GT passage no earlier unit covered (restated here from the
      definition, not taken from ragtrack), plus one relevant document that was never
      retrieved for each GT passage no unit covers (so its ideal ranking has room for it).
    * Recall and precision count passages: trec_eval sees the distinct passages in rank
      order, relevant when they are GT.
    """
    import random
    from collections import defaultdict

    import ir_measures
    from ir_measures import RR, P, R, Success, nDCG

    rng = random.Random(7)
    cases = {}
    for n in range(3000):
        ids = [f"p{i}" for i in range(rng.randint(1, 15))]
        gt = rng.sample(ids, rng.randint(1, min(4, len(ids))))
        units = [rng.sample(ids, rng.randint(0, min(3, len(ids)))) for _ in range(rng.randint(0, 10))]
        cases[f"q{n}"] = (units, gt, rng.choice([1, 3, 5, 10]))

    def unit_qrels(q):
        units, gt, _ = cases[q]
        seen, qrels = set(), []
        for i, unit in enumerate(units):
            new = {p for p in unit if p in gt and p not in seen}
            if new:
                qrels.append(ir_measures.Qrel(q, f"u{i}", 1))
            seen |= set(unit)
        covered = {p for unit in units for p in unit}
        qrels += [ir_measures.Qrel(q, f"missing-{p}", 1) for p in gt if p not in covered]
        return qrels

    def unit_run(queries):
        return [ir_measures.ScoredDoc(q, f"u{i}", float(100 - i)) for q in queries for i in range(len(cases[q][0]))]

    def passage_run(queries):
        out = []
        for q in queries:
            flat = list(dict.fromkeys(p for unit in cases[q][0] for p in unit))
            out += [ir_measures.ScoredDoc(q, p, float(100 - rank)) for rank, p in enumerate(flat)]
        return out

    passage_qrels = [ir_measures.Qrel(q, d, 1) for q, (_, gt, _) in cases.items() for d in gt]
    theirs: dict[tuple[str, str], float] = defaultdict(float)  # a query with nothing retrieved scores 0
    unit_qrels_all = [r for q in cases for r in unit_qrels(q)]
    for m in ir_measures.iter_calc([RR, Success @ 1000], unit_qrels_all, unit_run(cases)):
        theirs[m.query_id, str(m.measure)] = m.value
    for m in ir_measures.iter_calc([R @ 1000], passage_qrels, passage_run(cases)):
        theirs[m.query_id, str(m.measure)] = m.value
    by_cutoff, by_length = defaultdict(list), defaultdict(list)
    for q, (units, _, k) in cases.items():
        by_cutoff[k].append(q)
        by_length[len(passages_of(units))].append(q)
    for k, queries in by_cutoff.items():
        chosen = set(queries)
        qrels = [r for r in unit_qrels_all if r.query_id in chosen]
        for m in ir_measures.iter_calc([nDCG @ k, P @ k], qrels, unit_run(queries)):
            theirs[m.query_id, "ndcg" if str(m.measure).startswith("nDCG") else "P@k"] = m.value
    for length, queries in by_length.items():
        if length:
            chosen = set(queries)
            qrels = [r for r in passage_qrels if r.query_id in chosen]
            for m in ir_measures.iter_calc([P @ length], qrels, passage_run(queries)):
                theirs[m.query_id, "precision"] = m.value

    for q, (units, gt, k) in cases.items():
        assert reciprocal_rank(units, gt) == pytest.approx(theirs[q, "RR"]), q
        assert hit_rate(units, gt) == pytest.approx(theirs[q, "Success@1000"]), q
        assert ndcg_at_k(units, gt, k) == pytest.approx(theirs[q, "ndcg"]), q
        assert context_recall(units, gt) == pytest.approx(theirs[q, "R@1000"]), q
        assert context_precision(units, gt) == pytest.approx(theirs[q, "precision"]), q
        assert precision_at_k(units, gt, k) == pytest.approx(theirs[q, "P@k"]), q


def test_diagnosis_notes_units_that_cover_many_passages():
    from ragtrack.evaluation.diagnosis import diagnose
    from ragtrack.records import ContextRecord, ItemRecord

    def item(item_id, sizes):
        contexts = [ContextRecord(f"u{n}", "", [f"p{n}-{i}" for i in range(size)]) for n, size in enumerate(sizes)]
        return ItemRecord(item_id, "A", "q", ["g"], "a", "a", contexts, {}, {})

    records = [item("big", [13, 20, 9]), item("small", [1, 1, 2])]  # 46 passages in 6 units: 7.7 each
    [finding] = [f for f in diagnose({}, records) if f.symptom.startswith("large returned units")]
    assert "7.7 passages each" in finding.symptom and finding.worst[0] == ("big", 14.0)
    assert not any("large" in f.symptom for f in diagnose({}, [item("small", [1, 2, 3])]))


def test_diagnosis_states_judge_means_on_the_scale_the_tables_show():
    """Thresholds are on the 0–1 form; the symptom and the worst items speak 1–5, like the table above them."""
    from ragtrack.evaluation.aggregate import aggregate
    from ragtrack.evaluation.diagnosis import diagnose
    from ragtrack.records import ItemRecord, JudgeRecord

    def item(item_id, grounded, relevant):
        judges = {
            "groundedness": JudgeRecord(grounded, (grounded - 1) / 4, ""),
            "relevance": JudgeRecord(relevant, (relevant - 1) / 4, ""),
        }
        return ItemRecord(item_id, "A", "q", ["g"], "a", "a", [], {}, judges)

    records = [item("i1", 2, 3), item("i2", 4, 2), item("i3", 3, 4)]  # means 3.00 and 3.00: 0.50 in 0–1
    metrics = aggregate(records, ("groundedness", "relevance"))
    found = {f.symptom: f.worst for f in diagnose(metrics, records)}
    assert found == {
        "low groundedness (3.00 of 5)": (("i1", 2.0), ("i3", 3.0), ("i2", 4.0)),
        "low relevance (3.00 of 5)": (("i2", 2.0), ("i1", 3.0), ("i3", 4.0)),
    }


def test_diagnosis_reads_group_coverage_for_items_whose_gt_is_or_groups():
    """RGB items list 9 positives of which any one answers: 3 found is full coverage, not recall 0.33."""
    from ragtrack.evaluation.aggregate import aggregate
    from ragtrack.evaluation.diagnosis import diagnose
    from ragtrack.evaluation.retrieval_metrics import retrieval_scores
    from ragtrack.records import ContextRecord, ItemRecord

    positives = [f"p{n}" for n in range(9)]

    def item(item_id, found):
        contexts = [ContextRecord(f"u{n}", "", [p]) for n, p in enumerate(found)]
        scores = retrieval_scores([[p] for p in found], positives, 3, [positives])
        return ItemRecord(item_id, "A", "q", positives, "a", "a", contexts, scores, {}, gt_groups=[positives])

    records = [item("i1", ["p0", "p1", "p2"]), item("i2", ["p3", "x", "y"]), item("i3", ["p4", "p5", "z"])]
    metrics = aggregate(records, ())
    assert metrics["context_recall"] == pytest.approx(6 / 27) and metrics["all_hops_at_k"] == 1.0
    assert not [f for f in diagnose(metrics, records) if "recall" in f.symptom or "GT group" in f.symptom]

    records += [item("i4", ["x", "y", "z"]), item("i5", ["w", "x", "y"])]
    metrics = aggregate(records, ())
    [finding] = [f for f in diagnose(metrics, records) if "GT group" in f.symptom]
    assert finding.symptom == "few items with a passage of every GT group (all_hops_at_k 0.60)"
    assert finding.worst[0] == ("i4", 0.0)
    records[0].gt_groups = []  # one item without groups: recall is the figure again
    assert any(f.symptom.startswith("low context recall") for f in diagnose(metrics, records))


def test_precision_at_k_divides_by_k_and_counts_a_repeat_as_non_relevant():
    # GT a, b; units: a, a again (a repeat), x, b → relevant at ranks 1 and 4
    units = [["a"], ["a"], ["x"], ["b"]]
    assert precision_at_k(units, ["a", "b"], 4) == 0.5
    assert precision_at_k(units, ["a", "b"], 2) == 0.5  # the repeat at rank 2 brings nothing
    assert precision_at_k(units, ["a", "b"], 10) == 0.2  # a short list is not let off: 2 / 10
    assert context_precision(units, ["a", "b"]) == 2 / 3  # the distinct-passage view: a, x, b
    assert precision_at_k([["a", "b"]], ["a", "b"], 1) == 1.0  # one unit, two GT passages: one relevant unit
    assert precision_at_k([], ["a"], 3) == 0.0 and precision_at_k(units, ["a"], 0) == 0.0
