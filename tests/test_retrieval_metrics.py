"""Retrieval metrics against values computed by hand."""

import math

import pytest

from ragtrack.evaluation.retrieval_metrics import (
    all_hit,
    context_precision,
    context_recall,
    dedupe,
    hit_rate,
    mean,
    ndcg_at_k,
    reciprocal_rank,
)

GT = ["g1", "g2"]


def test_perfect_retrieval():
    assert context_recall(["g1", "g2"], GT) == 1.0
    assert context_precision(["g1", "g2"], GT) == 1.0
    assert reciprocal_rank(["g1", "g2"], GT) == 1.0
    assert ndcg_at_k(["g1", "g2"], GT, 5) == pytest.approx(1.0)


def test_partial_retrieval_hand_computed():
    retrieved = ["x", "g2", "y", "z"]
    assert context_recall(retrieved, GT) == 0.5  # 1 of 2 GT found
    assert context_precision(retrieved, GT) == 0.25  # 1 of 4 retrieved is GT
    assert reciprocal_rank(retrieved, GT) == 0.5  # first GT at rank 2
    assert hit_rate(retrieved, GT) == 1.0
    # DCG = 1/log2(3); ideal (2 GT) = 1 + 1/log2(3)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(retrieved, GT, 4) == pytest.approx(expected)


def test_empty_retrieval_scores_zero_not_nan():
    for fn in (context_recall, context_precision, reciprocal_rank, hit_rate):
        assert fn([], GT) == 0.0
    assert ndcg_at_k([], GT, 5) == 0.0


def test_gt_never_retrieved():
    retrieved = ["a", "b", "c"]
    assert context_recall(retrieved, GT) == 0.0
    assert context_precision(retrieved, GT) == 0.0
    assert reciprocal_rank(retrieved, GT) == 0.0
    assert hit_rate(retrieved, GT) == 0.0
    assert ndcg_at_k(retrieved, GT, 3) == 0.0


def test_duplicates_count_once_at_first_rank():
    # Two chunks mapped to the same passage: it counts once, at rank 1.
    retrieved = ["g1", "g1", "x", "g2"]
    assert dedupe(retrieved) == ["g1", "x", "g2"]
    assert context_precision(retrieved, GT) == pytest.approx(2 / 3)
    assert reciprocal_rank(["x", "x", "g2"], GT) == 0.5  # rank after dedupe is 2, not 3
    assert context_recall(retrieved, GT) == 1.0


def test_ndcg_cuts_at_k():
    # GT at rank 3 is outside k=2.
    assert ndcg_at_k(["a", "b", "g1"], GT, 2) == 0.0
    # single GT at rank 1 with |GT| = 1 is perfect
    assert ndcg_at_k(["g1", "a"], ["g1"], 2) == 1.0


def test_all_hit_needs_every_group():
    groups = [["a", "b"], ["c"]]
    assert all_hit(["b", "c"], groups) == 1.0
    assert all_hit(["a", "b"], groups) == 0.0


def test_mean_ignores_missing_and_is_none_when_empty():
    assert mean([1.0, None, 0.0]) == 0.5
    assert mean([]) is None
    assert mean([float("nan")]) is None


def test_metrics_agree_with_trec_eval_on_thousands_of_random_rankings():
    """Cross-check against an independent implementation: trec_eval (pytrec_eval, via ir-measures).

    Random rankings over a small ID space, so duplicates (several units mapping to one
    passage) and empty retrievals occur often. trec_eval takes one score per document, so
    it sees each ranking deduplicated, which is exactly how ragtrack ranks passages.
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
        retrieved = [rng.choice(ids) for _ in range(rng.randint(0, 12))]
        cases[f"q{n}"] = (retrieved, gt, rng.choice([1, 3, 5, 10]))

    qrels = [ir_measures.Qrel(q, d, 1) for q, (_, gt, _) in cases.items() for d in gt]

    def run_of(queries):
        return [
            ir_measures.ScoredDoc(q, d, float(100 - rank))
            for q in queries
            for rank, d in enumerate(dedupe(cases[q][0]))
        ]

    theirs: dict[tuple[str, str], float] = defaultdict(float)  # a query with nothing retrieved scores 0
    measures = [RR, R @ 1000, Success @ 1000]
    for m in ir_measures.iter_calc(measures, qrels, run_of(cases)):
        theirs[m.query_id, str(m.measure)] = m.value
    by_cutoff, by_length = defaultdict(list), defaultdict(list)
    for q, (retrieved, _, k) in cases.items():
        by_cutoff[k].append(q)
        by_length[len(dedupe(retrieved))].append(q)
    for k, queries in by_cutoff.items():
        for m in ir_measures.iter_calc([nDCG @ k], [r for r in qrels if r.query_id in set(queries)], run_of(queries)):
            theirs[m.query_id, "ndcg"] = m.value
    for length, queries in by_length.items():
        if length:
            chosen = set(queries)
            for m in ir_measures.iter_calc([P @ length], [r for r in qrels if r.query_id in chosen], run_of(queries)):
                theirs[m.query_id, "precision"] = m.value

    for q, (retrieved, gt, k) in cases.items():
        assert reciprocal_rank(retrieved, gt) == pytest.approx(theirs[q, "RR"]), q
        assert context_recall(retrieved, gt) == pytest.approx(theirs[q, "R@1000"]), q
        assert hit_rate(retrieved, gt) == pytest.approx(theirs[q, "Success@1000"]), q
        assert ndcg_at_k(retrieved, gt, k) == pytest.approx(theirs[q, "ndcg"]), q
        assert context_precision(retrieved, gt) == pytest.approx(theirs[q, "precision"]), q
