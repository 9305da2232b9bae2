"""Two runs' per-item records → paired differences per metric and scope, and the items that moved.

Pure: records in, plain data out. Finding the runs and logging the result is
:mod:`ragtrack.tracking.compare`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrack.evaluation.aggregate import RETRIEVAL_METRICS, item_value
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.runner import ItemRecord
from ragtrack.evaluation.stats import PairedDifference, compare_paired
from ragtrack.golden import TYPES

METRICS: tuple[str, ...] = (*RETRIEVAL_METRICS, *JUDGES)


@dataclass(frozen=True)
class MetricRow:
    metric: str
    scope: str  # "all" or "type_A" …
    diff: PairedDifference
    items_total: int  # items in the scope; diff.n may be fewer for a judge with errors

    @property
    def partial(self) -> bool:
        return self.diff.n < self.items_total


@dataclass(frozen=True)
class ItemChange:
    id: str
    type: str
    question: str
    metric: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


def compare_records(
    a: list[ItemRecord], b: list[ItemRecord], metrics: tuple[str, ...] = METRICS
) -> tuple[list[MetricRow], list[ItemChange]]:
    """Pair items by ID; for each metric and scope, the paired difference b − a.

    Judge metrics pair only items that both runs scored; the row says how many.
    """
    by_id = {r.id: r for r in a}
    pairs = [(by_id[r.id], r) for r in b if r.id in by_id]
    rows: list[MetricRow] = []
    for scope in ("all", *(f"type_{t}" for t in TYPES)):
        scoped = [(x, y) for x, y in pairs if scope == "all" or f"type_{x.type}" == scope]
        if not scoped:
            continue
        for metric in metrics:
            values = [(item_value(x, metric), item_value(y, metric)) for x, y in scoped]
            both = [(va, vb) for va, vb in values if va is not None and vb is not None]
            if not both:
                continue
            diff = compare_paired([va for va, _ in both], [vb for _, vb in both])
            rows.append(MetricRow(metric, scope, diff, len(scoped)))
    changes = [
        ItemChange(y.id, y.type, y.question, metric, va, vb)
        for x, y in pairs
        for metric in metrics
        if (va := item_value(x, metric)) is not None and (vb := item_value(y, metric)) is not None and va != vb
    ]
    changes.sort(key=lambda c: (-abs(c.delta), c.id, c.metric))
    return rows, changes
