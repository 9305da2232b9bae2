"""Reading the numbers: which stage to fix first, and the items that show it.

Retrieval first, then generation — a generator cannot use material it never
saw. Each rule names a symptom, where it points, the usual fixes, and the
worst items for that symptom so the reader can look at real cases.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrack.evaluation.metrics import item_value, judge_metric
from ragtrack.records import ItemRecord


@dataclass(frozen=True)
class Thresholds:
    recall: float = 0.7
    precision: float = 0.4
    mrr: float = 0.6
    groundedness: float = 0.75  # normalised 0–1
    relevance: float = 0.6  # normalised 0–1
    high: float = 0.8  # what counts as "high" in the combined rules
    passages_per_unit: float = 3.0  # returned units this large make recall cheap and precision low


@dataclass(frozen=True)
class Finding:
    symptom: str
    meaning: str
    fixes: str
    worst: tuple[tuple[str, float], ...]  # (item id, value), worst first


def _worst(records: list[ItemRecord], metric: str, n: int = 3) -> tuple[tuple[str, float], ...]:
    scored = [(r.id, v) for r in records if (v := item_value(r, metric)) is not None]
    return tuple(sorted(scored, key=lambda x: (x[1], x[0]))[:n])


def _largest(records: list[ItemRecord], n: int = 3) -> tuple[tuple[str, float], ...]:
    """Items whose returned units cover the most passages on average, largest first."""
    sized = [(r.id, sum(len(c.passage_ids) for c in r.contexts) / len(r.contexts)) for r in records if r.contexts]
    return tuple(sorted(sized, key=lambda x: (-x[1], x[0]))[:n])


def _of_5(metrics: dict[str, float], judge: str) -> str:
    """A judge mean as the tables show it (1–5): the thresholds are on the 0–1 form, the reader is not."""
    return f"{metrics[judge]:.2f} of 5"


def diagnose(metrics: dict[str, float], records: list[ItemRecord], t: Thresholds = Thresholds()) -> list[Finding]:
    """Apply the diagnosis rules to one run's aggregate metrics."""
    out: list[Finding] = []
    recall, precision, mrr = metrics.get("context_recall"), metrics.get("context_precision"), metrics.get("mrr")
    grounded, relevant = (metrics.get(judge_metric(j, normalized=True).name) for j in ("groundedness", "relevance"))

    # Items whose GT is OR-groups (any passage of a group will do: RGB's positives, a hop of HotpotQA) are
    # covered when every group is: recall's share of all listed passages would call 5 of 9 positives missing.
    coverage, covered_by = recall, "context_recall"
    if records and all(r.gt_groups for r in records) and metrics.get("all_hops_at_k") is not None:
        coverage, covered_by = metrics["all_hops_at_k"], "all_hops_at_k"
    if coverage is not None and coverage < t.recall:
        if precision is not None and precision >= t.high:
            meaning = "retrieval is too conservative: what it returns is right, but it returns too little"
            fixes = "raise top_k or the first-stage pool, add multi-query rewriting or hybrid BM25"
        else:
            meaning = "the generator never saw part of the material it needed"
            fixes = "revisit chunking and embeddings, raise top_k, add hybrid BM25 and query rewriting"
        symptom = (
            f"low context recall ({coverage:.2f})"
            if covered_by == "context_recall"
            else f"few items with a passage of every GT group (all_hops_at_k {coverage:.2f})"
        )
        out.append(Finding(symptom, meaning, fixes, _worst(records, covered_by)))
    if precision is not None and precision < t.precision:
        out.append(
            Finding(
                f"low context precision ({precision:.2f})",
                "noise: most contexts handed to the generator are not needed",
                "add a reranker, a score threshold or metadata filters; lower top_k",
                _worst(records, "context_precision"),
            )
        )
    if mrr is not None and mrr < t.mrr:
        out.append(
            Finding(
                f"low MRR ({mrr:.2f})",
                "the right context is found but ranked low, where models attend least",
                "add or tune a cross-encoder reranker; reweight hybrid fusion",
                _worst(records, "mrr"),
            )
        )
    sizes = [len(c.passage_ids) for r in records for c in r.contexts]
    per_unit = sum(sizes) / len(sizes) if sizes else 0.0
    if per_unit > t.passages_per_unit:
        out.append(
            Finding(
                f"large returned units ({per_unit:.1f} passages each on average)",
                "recall and precision count passages, so a few large units buy recall with precision; "
                "MRR, hit rate and nDCG rank the units themselves and say nothing about what else they hold",
                "compare versions at a similar context budget; lower parent_level or top_k, or rerank children",
                _largest(records),
            )
        )
    if grounded is not None and grounded < t.groundedness:
        out.append(
            Finding(
                f"low groundedness ({_of_5(metrics, 'groundedness')})",
                "the generator adds claims the contexts do not support",
                "tighten the prompt to the contexts only, lower temperature, or change the generator model",
                _worst(records, "groundedness"),
            )
        )
    if relevant is not None and relevant < t.relevance:
        if grounded is not None and grounded >= t.high:
            meaning = "faithful answers to the wrong material: retrieval handed over the wrong contexts"
            fixes = "fix retrieval first (recall, reranking), not the prompt"
        else:
            meaning = "answers drift from the question"
            fixes = "sharpen the task instruction in the answer prompt"
        symptom = f"low relevance ({_of_5(metrics, 'relevance')})"
        out.append(Finding(symptom, meaning, fixes, _worst(records, "relevance")))
    return out


def render(findings: list[Finding]) -> str:
    if not findings:
        return "No symptom crossed its threshold."
    lines = []
    for f in findings:
        lines.append(f"- {f.symptom}: {f.meaning}.")
        lines.append(f"  try: {f.fixes}.")
        if f.worst:
            lines.append("  worst items: " + ", ".join(f"{i} ({v:.2f})" for i, v in f.worst))
    return "\n".join(lines)
