"""Per-item records → the run's metrics: overall, per question type, with counts.

A judge mean covers only the items that judge scored; the ``counts/judged/<judge>``
count says how many. Likewise the retrieval means cover the items whose reply said
what it retrieved (``counts/retrieval_reported``). A metric with no values is left out, never logged as NaN.
Names come from :mod:`ragtrack.evaluation.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.nodes import node_metrics
from ragtrack.evaluation.retrieval_metrics import mean
from ragtrack.records import ItemRecord


def _summarise(records: list[ItemRecord], judges: list[str], scope: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in m.RETRIEVAL:
        value = mean(m.item_value(r, name) for r in records)
        if value is not None:
            out[m.key(name, scope)] = value
    out[m.key(m.RETRIEVAL_N, scope)] = float(sum(1 for r in records if r.retrieval))
    for name in m.CITATION:
        value = mean(m.item_value(r, name) for r in records)
        if value is not None:
            out[m.key(name, scope)] = value
    contexts = [c for r in records for c in r.contexts]
    if contexts:
        out[m.key(m.UNMAPPED_SHARE, scope)] = sum(1 for c in contexts if not c.passage_ids) / len(contexts)
    if scope == m.ALL:
        out[m.AGENT_ERRORS] = float(sum(1 for r in records if r.errors))
        out[m.UNANSWERED] = float(sum(1 for r in records if not r.answered))
    for judge in judges:
        scored = [r for r in records if judge in r.judges and r.judges[judge].score is not None]
        out[m.key(m.judge_count(judge), scope)] = float(len(scored))
        if scope == m.ALL:
            errors = sum(1 for r in records if judge in r.judges and r.judges[judge].error)
            out[m.judge_errors(judge)] = float(errors)
            spreads = [_sd(r.judges[judge].samples) for r in scored if len(r.judges[judge].samples) > 1]
            if spreads:
                out[m.judge_spread(judge)] = sum(spreads) / len(spreads)
        if scored:
            for metric in (m.judge_metric(judge), m.judge_metric(judge, normalized=True)):
                out[m.key(metric.name, scope)] = mean(m.item_value(r, metric.name) for r in scored)
    out[m.key(m.ITEMS, scope)] = float(len(records))
    return out


def _sd(values: list[int]) -> float:
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def aggregate(records: list[ItemRecord], judges: Iterable[str] | None = None) -> dict[str, float]:
    """The run's metrics over ``records`` (every registered judge unless ``judges`` narrows them)."""
    judges = [JUDGES.check(j) for j in (judges if judges is not None else JUDGES.names())]
    out = _summarise(records, judges, m.ALL)
    out.update(node_metrics(records))
    for t in m.TYPES:
        subset = [r for r in records if r.type == t]
        if subset:
            out.update(_summarise(subset, judges, t))
    return out
