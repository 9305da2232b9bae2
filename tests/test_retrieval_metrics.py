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
