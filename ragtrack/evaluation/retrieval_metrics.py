"""Retrieval metrics from context IDs: small pure functions over plain data.

``retrieved`` is the ranked list of canonical passage IDs an agent returned
(it may contain duplicates: several chunks can map to one passage; a passage
counts once, at the rank where it first appears). ``relevant`` is the
golden item's GT context IDs, a minimal sufficient set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def dedupe(retrieved: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each ID, preserving rank order."""
    seen: set[str] = set()
    return [x for x in retrieved if not (x in seen or seen.add(x))]


def context_recall(retrieved: Sequence[str], relevant: Iterable[str]) -> float:
    """|retrieved ∩ GT| / |GT|: did the agent find everything the answer needs?"""
    gt = set(relevant)
    return len(gt & set(retrieved)) / len(gt) if gt else 0.0


def context_precision(retrieved: Sequence[str], relevant: Iterable[str]) -> float:
    """|retrieved ∩ GT| / |retrieved| over distinct IDs: the signal-to-noise of the contexts.

    An empty retrieval has precision 0: it handed the generator nothing useful.
    """
    ranked = dedupe(retrieved)
    return len(set(relevant) & set(ranked)) / len(ranked) if ranked else 0.0


def reciprocal_rank(retrieved: Sequence[str], relevant: Iterable[str]) -> float:
    """1 / rank of the first GT context (ranks from 1, after dedupe); 0 when none is found."""
    gt = set(relevant)
    for rank, pid in enumerate(dedupe(retrieved), start=1):
        if pid in gt:
            return 1.0 / rank
    return 0.0


def hit_rate(retrieved: Sequence[str], relevant: Iterable[str]) -> float:
    """1 when at least one GT context was retrieved, else 0."""
    return 1.0 if set(relevant) & set(retrieved) else 0.0


def ndcg_at_k(retrieved: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG over the first ``k`` distinct retrieved IDs.

    DCG = Σ rel_i / log2(i + 1) for ranks i = 1..k; the ideal ranking puts all
    min(|GT|, k) relevant IDs first.
    """
    gt = set(relevant)
    if not gt or k <= 0:
        return 0.0
    ranked = dedupe(retrieved)[:k]
    dcg = sum(1.0 / math.log2(i + 1) for i, pid in enumerate(ranked, start=1) if pid in gt)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gt), k) + 1))
    return dcg / ideal


def all_hit(retrieved: Sequence[str], groups: Iterable[Iterable[str]]) -> float:
    """1 when every group (an OR of IDs, e.g. one per hop) has a member retrieved."""
    got = set(retrieved)
    return 1.0 if all(got & set(g) for g in groups) else 0.0


def all_hops_at_k(retrieved: Sequence[str], groups: Iterable[Iterable[str]], k: int) -> float:
    """1 when every GT group (one per hop) has a member among the first ``k`` distinct retrieved IDs."""
    return all_hit(dedupe(retrieved)[:k], groups)


def retrieval_scores(
    retrieved: Sequence[str], relevant: Iterable[str], k: int, groups: Sequence[Sequence[str]] = ()
) -> dict[str, float | None]:
    """All per-item retrieval metrics, keyed by their logged names.

    ``all_hops_at_k`` applies only to items with GT groups; it is None for the others.
    """
    relevant = list(relevant)
    return {
        "context_recall": context_recall(retrieved, relevant),
        "context_precision": context_precision(retrieved, relevant),
        "reciprocal_rank": reciprocal_rank(retrieved, relevant),
        "hit_rate": hit_rate(retrieved, relevant),
        "ndcg_at_k": ndcg_at_k(retrieved, relevant, k),
        "all_hops_at_k": all_hops_at_k(retrieved, groups, k) if groups else None,
    }


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean, or ``None`` for no values (never NaN)."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else None
