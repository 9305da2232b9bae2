"""Retrieval metrics from context IDs: small pure functions over plain data.

``units`` is what an agent returned, in rank order: one entry per returned
unit (a chunk, a Q&A pair, a parent section, a platform segment), each the
list of canonical passage IDs that unit covers (empty when it maps to none).
``relevant`` is the golden item's GT context IDs, a minimal sufficient set.

Two views of the same retrieval, each where it means something:

* **recall and precision count passages** — did the contexts hold what the
  answer needs, and how much else came with it. A passage covered by several
  units counts once.
* **rank metrics rank the units the agent returned** (precision@k, MRR, hit
  rate, nDCG, all-hops@k): a unit is relevant when it covers a GT passage that
  no higher-ranked unit already covered, and the passages a unit covers share
  its rank. A parent section that holds the GT passage at rank 1 is rank 1,
  however many passages come before the GT one inside it. Repeated chunks of
  one passage: the first is relevant (if the passage is GT), every later one
  takes its rank as a non-relevant unit — it pushes later units down in MRR
  and nDCG (their gain is discounted by rank) and counts in precision@k's k,
  exactly as ranx and trec_eval score a run whose repeats are non-relevant
  placeholders.

With one passage per unit both views coincide with the textbook definitions
(tests cross-check them against trec_eval, and per item against ranx on the
imported HotpotQA-100).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

Units = Sequence[Sequence[str]]


def dedupe(retrieved: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each ID, preserving rank order."""
    seen: set[str] = set()
    return [x for x in retrieved if not (x in seen or seen.add(x))]


def passages_of(units: Units) -> list[str]:
    """The distinct passage IDs the units cover, in rank order (a passage at its first unit)."""
    return dedupe(pid for unit in units for pid in unit)


def relevant_units(units: Units, relevant: Iterable[str]) -> list[bool]:
    """Per returned unit: does it cover a GT passage that no higher-ranked unit covered?"""
    gt, seen, out = set(relevant), set(), []
    for unit in units:
        new = (set(unit) & gt) - seen
        out.append(bool(new))
        seen |= new
    return out


def context_recall(units: Units, relevant: Iterable[str]) -> float:
    """|retrieved ∩ GT| / |GT| over passages: did the agent find everything the answer needs?"""
    gt = set(relevant)
    return len(gt & set(passages_of(units))) / len(gt) if gt else 0.0


def context_precision(units: Units, relevant: Iterable[str]) -> float:
    """|retrieved ∩ GT| / |retrieved| over distinct passages: the signal-to-noise of the contexts.

    An empty retrieval has precision 0: it handed the generator nothing useful.
    """
    ranked = passages_of(units)
    return len(set(relevant) & set(ranked)) / len(ranked) if ranked else 0.0


def precision_at_k(units: Units, relevant: Iterable[str], k: int) -> float:
    """Relevant units among the first ``k`` returned, divided by ``k``: precision@k as trec_eval and ranx
    define it. A unit is relevant when it brings a GT passage no higher unit brought, so a second window
    over the same passage counts as retrieved and non-relevant (as a repeated document does for them),
    and a list shorter than ``k`` is not let off: its missing ranks count as non-relevant.

    :func:`context_precision` is the other view: the share of the *distinct passages* that are GT.
    """
    if k <= 0:
        return 0.0
    return sum(relevant_units(units, relevant)[:k]) / k


def reciprocal_rank(units: Units, relevant: Iterable[str]) -> float:
    """1 / rank of the first unit that covers a GT passage (ranks from 1); 0 when none does."""
    for rank, hit in enumerate(relevant_units(units, relevant), start=1):
        if hit:
            return 1.0 / rank
    return 0.0


def hit_rate(units: Units, relevant: Iterable[str]) -> float:
    """1 when at least one returned unit covers a GT passage, else 0."""
    return 1.0 if any(relevant_units(units, relevant)) else 0.0


def ndcg_at_k(units: Units, relevant: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG over the first ``k`` returned units.

    DCG = Σ rel_i / log2(i + 1) for units i = 1..k. The ideal ranking puts every
    relevant unit first, plus one more unit for each GT passage that no returned
    unit covers (the best a retriever could have done is bring each of them in a
    unit of its own): so a missing GT passage costs nDCG, while one unit holding
    several GT passages is not penalised for holding them together. With one
    passage per unit this is the usual nDCG with all |GT| passages ideal.
    """
    gt = set(relevant)
    if not gt or k <= 0:
        return 0.0
    rel = relevant_units(units, gt)
    missing = len(gt - set(passages_of(units)))
    dcg = sum(1.0 / math.log2(i + 1) for i, hit in enumerate(rel[:k], start=1) if hit)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(sum(rel) + missing, k) + 1))
    return dcg / ideal


def all_hit(retrieved: Iterable[str], groups: Iterable[Iterable[str]]) -> float:
    """1 when every group (an OR of passage IDs, e.g. one per hop) has a member among ``retrieved``."""
    got = set(retrieved)
    return 1.0 if all(got & set(g) for g in groups) else 0.0


def all_hops_at_k(units: Units, groups: Iterable[Iterable[str]], k: int) -> float:
    """1 when every GT group (one per hop) has a passage covered by one of the first ``k`` units."""
    return all_hit(passages_of(units[:k]), groups)


def retrieval_scores(
    units: Units, relevant: Iterable[str], k: int, groups: Sequence[Sequence[str]] = ()
) -> dict[str, float | None]:
    """All per-item retrieval metrics, keyed by their logged names.

    ``all_hops_at_k`` applies only to items with GT groups; it is None for the others.
    """
    relevant = list(relevant)
    return {
        "context_recall": context_recall(units, relevant),
        "context_precision": context_precision(units, relevant),
        "precision_at_k": precision_at_k(units, relevant, k),
        "reciprocal_rank": reciprocal_rank(units, relevant),
        "hit_rate": hit_rate(units, relevant),
        "ndcg_at_k": ndcg_at_k(units, relevant, k),
        "all_hops_at_k": all_hops_at_k(units, groups, k) if groups else None,
    }


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean, or ``None`` for no values (never NaN)."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else None
