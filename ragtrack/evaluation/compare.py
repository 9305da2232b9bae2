"""Two runs side by side: comparability, paired differences per metric and scope, items that moved.

Pure: records and run summaries in, plain data out. Finding the runs and
logging the result is :mod:`ragtrack.tracking.compare`'s job.

Two eval runs are comparable only when they scored the same golden set (same
content digest, which covers the corpus), with the same judge (backend,
model, prompt hash, temperature) and the same ID-mapping threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.multiplicity import holm
from ragtrack.evaluation.stats import PairedDifference, compare_paired
from ragtrack.records import ItemRecord, RunSummary


def comparability_problems(a: RunSummary, b: RunSummary) -> list[str]:
    problems = []
    if a.golden_digest != b.golden_digest:
        problems.append(f"different golden sets (digest {a.golden_digest} vs {b.golden_digest})")
    if a.judge_identity != b.judge_identity:
        problems.append(f"different judges ({a.judge_identity} vs {b.judge_identity})")
    if a.min_overlap != b.min_overlap:
        problems.append(f"different ID-mapping thresholds ({a.min_overlap} vs {b.min_overlap})")
    return problems


def inputs_text(a: RunSummary, b: RunSummary) -> str:
    """What the two runs were evaluated on, in a heading: one golden set and judge, or each side's when
    ``--allow-incomparable`` paired runs on different ones (B's alone read as if both had B's)."""
    if (a.golden_digest, a.judge_identity) == (b.golden_digest, b.judge_identity):
        return f"golden {b.golden_digest}, judge {b.judge_identity}"
    return (
        f"NOT COMPARABLE: {a.version} on golden {a.golden_digest}, judge {a.judge_identity}; "
        f"{b.version} on golden {b.golden_digest}, judge {b.judge_identity}"
    )


def rank_depth(run: RunSummary, records: list[ItemRecord]) -> str:
    """The k a run's rank metrics were cut at: its agent's top_k, or — for an agent that returns what it
    returns (``contexts``, a platform's app) — the numbers of contexts its answers had (``4``, ``3–6``)."""
    if run.rank_cutoff != "contexts":
        return run.rank_cutoff
    counts = sorted({len(r.contexts) for r in records if r.retrieval})
    if not counts:
        return run.rank_cutoff
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def cutoff_note(a_depth: str, b_depth: str) -> str | None:
    """Versions that return different numbers of contexts (:func:`rank_depth`) have their rank metrics cut
    at different k: a caution for reading the comparison, not a reason to refuse it (promotion does not
    read them)."""
    if a_depth and b_depth and a_depth != b_depth:
        return (
            f"nDCG and all_hops_at_k are cut at each version's own k ({a_depth} vs {b_depth}): "
            "their difference mixes ranking quality with the number of contexts returned"
        )
    return None


@dataclass(frozen=True)
class MetricRow:
    """One metric in one scope, paired a → b over the items both runs scored.

    ``primary``: one of the promotion rule's metrics over all items (◆). Every row, primary ones
    included, is one test of a single family: its ``p_adjusted`` is Holm-corrected across all rows
    (:mod:`ragtrack.evaluation.multiplicity`). The promotion gate does not read these marks: it
    decides on its own pre-declared one-sided tests (:mod:`ragtrack.evaluation.promotion`).
    """

    metric: str
    scope: str  # "all" or a question type
    diff: PairedDifference
    items_total: int  # items in the scope the metric applies to; diff.n may be fewer for a judge with errors
    primary: bool = False
    p_adjusted: float = 1.0

    @property
    def partial(self) -> bool:
        return self.diff.n < self.items_total

    @property
    def significant(self) -> bool:
        """The row's mark: its interval excludes 0 and its Holm-adjusted p is below 0.05 (testable rows only)."""
        d = self.diff
        return d.excludes_zero and self.p_adjusted < 0.05 and d.testable


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
    a: list[ItemRecord],
    b: list[ItemRecord],
    metrics: tuple[str, ...] | None = None,
    clusters: Mapping[str, str] | None = None,
) -> tuple[list[MetricRow], list[ItemChange]]:
    """Pair items by ID; for each metric and scope, the paired difference b − a.

    ``clusters`` (item ID → cluster label, :func:`ragtrack.evaluation.clustering.cluster_labels`)
    makes every interval and test resample clusters; judge metrics whose items carry several
    verdicts (``--judge-samples``) report the judge's own noise. Judge metrics pair only items that
    both runs scored; the row says how many. Rows of the promotion rule's metrics over all items
    are primary (◆); every row's p-value is Holm-adjusted in one family.
    """
    metrics = metrics or m.comparable_metrics()
    by_id = {r.id: r for r in a}
    pairs = [(by_id[r.id], r) for r in b if r.id in by_id]
    rows: list[MetricRow] = []
    for scope in (m.ALL, *m.TYPES):
        scoped = [(x, y) for x, y in pairs if scope in (m.ALL, x.type)]
        if not scoped:
            continue
        for metric in metrics:
            both = [
                (x, y, va, vb)
                for x, y in scoped
                if (va := m.item_value(x, metric)) is not None and (vb := m.item_value(y, metric)) is not None
            ]
            if not both:
                continue
            samples = None
            if m.lookup(metric).judge:
                samples = [(m.item_samples(x, metric), m.item_samples(y, metric)) for x, y, _, _ in both]
            diff = compare_paired(
                [va for *_, va, _ in both],
                [vb for *_, vb in both],
                clusters=[clusters[y.id] for _, y, _, _ in both] if clusters is not None else None,
                samples=samples,
            )
            total = sum(m.applies(y, metric) for _, y in scoped)
            rows.append(MetricRow(metric, scope, diff, total, primary=scope == m.ALL and metric in m.PRIMARY))
    changes = [
        ItemChange(y.id, y.type, y.question, metric, va, vb)
        for x, y in pairs
        for metric in metrics
        if (va := m.item_value(x, metric)) is not None and (vb := m.item_value(y, metric)) is not None and va != vb
    ]
    changes.sort(key=lambda c: (-abs(c.delta), c.id, c.metric))
    return adjusted(rows), changes


def adjusted(rows: list[MetricRow]) -> list[MetricRow]:
    """``rows`` with each row's Holm-adjusted p, all rows one family."""
    return [replace(r, p_adjusted=p) for r, p in zip(rows, holm([r.diff.p_value for r in rows]), strict=True)]


def overall(rows: list[MetricRow]) -> dict[str, PairedDifference]:
    """The all-items row of each metric."""
    return {r.metric: r.diff for r in rows if r.scope == m.ALL}
