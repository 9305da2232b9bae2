"""Per-item records → the run's metrics: overall, per question type, with counts.

Naming (identical for every version, so MLflow's compare view lines them up):

* retrieval: ``context_recall``, ``context_precision``, ``mrr``, ``hit_rate``, ``ndcg_at_k``;
* judges: ``<judge>`` (mean 1–5), ``<judge>_norm`` (0–1), ``<judge>_n`` (items scored),
  ``judge_errors/<judge>`` (items whose verdict could not be read);
* per type: ``<metric>/type_A`` … ``/type_D``.

A judge mean covers only the items that judge scored; the ``_n`` count says
how many. A metric with no values is left out, never logged as NaN.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.retrieval_metrics import mean
from ragtrack.evaluation.runner import ItemRecord
from ragtrack.golden import TYPES

RETRIEVAL_METRICS = {
    "context_recall": "context_recall",
    "context_precision": "context_precision",
    "mrr": "reciprocal_rank",
    "hit_rate": "hit_rate",
    "ndcg_at_k": "ndcg_at_k",
}


def item_value(record: ItemRecord, metric: str) -> float | None:
    """One item's value of an aggregate metric name (``mrr``, ``correctness``, ``correctness_norm``)."""
    if metric in RETRIEVAL_METRICS:
        return record.retrieval[RETRIEVAL_METRICS[metric]]
    judge, _, suffix = metric.partition("_")
    verdict = record.judges.get(judge)
    if verdict is None or verdict.score is None:
        return None
    return verdict.normalized if suffix == "norm" else float(verdict.score)


def _summarise(records: list[ItemRecord], judges: Iterable[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in RETRIEVAL_METRICS:
        value = mean(item_value(r, name) for r in records)
        if value is not None:
            out[name] = value
    for judge in judges:
        scored = [r for r in records if judge in r.judges and r.judges[judge].score is not None]
        out[f"{judge}_n"] = float(len(scored))
        out[f"judge_errors/{judge}"] = float(sum(1 for r in records if judge in r.judges and r.judges[judge].error))
        if scored:
            out[judge] = mean(float(r.judges[judge].score) for r in scored)
            out[f"{judge}_norm"] = mean(r.judges[judge].normalized for r in scored)
    return out


def aggregate(records: list[ItemRecord], judges: Iterable[str] = JUDGES) -> dict[str, float]:
    judges = list(judges)
    out = _summarise(records, judges)
    out["items"] = float(len(records))
    for t in TYPES:
        subset = [r for r in records if r.type == t]
        if not subset:
            continue
        for key, value in _summarise(subset, judges).items():
            if not key.startswith("judge_errors/"):
                out[f"{key}/type_{t}"] = value
        out[f"items/type_{t}"] = float(len(subset))
    return out
