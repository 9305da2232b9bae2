"""Logging a comparison of two eval runs: the table, the items that moved, a per-type plot."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow
from ragtrack.evaluation.human_labels import DELTA, PPIReport
from ragtrack.records import RunSummary
from ragtrack.tracking import descriptions
from ragtrack.tracking.datasets import log_human_labels
from ragtrack.tracking.store import Store, Tag


def per_type_plot(
    runs: list[RunSummary],
    path: Path,
    metrics: tuple[str, ...] = ("norm/correctness", "norm/groundedness", "context_recall", "mrr"),
) -> None:
    """Bars per question type (and over all items) for one run or two side by side, one panel per metric.

    Drawn on a bare ``Figure`` rather than through pyplot: no global backend switch in the
    caller's process, and no pyplot import (a third of the plot's cost).
    """
    from matplotlib.figure import Figure

    scopes = [m.ALL] + [t for t in m.TYPES if m.key(m.ITEMS, t) in runs[-1].metrics]
    width = 0.8 / len(runs)
    fig = Figure(figsize=(4 * len(metrics), 3.4))
    axes = fig.subplots(1, len(metrics), sharey=True)
    for ax, metric in zip(axes, metrics, strict=True):
        for n, run in enumerate(runs):
            xs = [x + (n - (len(runs) - 1) / 2) * width for x in range(len(scopes))]
            ax.bar(xs, [run.metrics.get(m.key(metric, s), 0.0) for s in scopes], width=width, label=run.version)
        ax.set_xticks(range(len(scopes)), ["all" if s == m.ALL else f"type {s}" for s in scopes])
        ax.set_title(metric)
        ax.set_ylim(0, 1)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def comparison_metrics(rows: Iterable[MetricRow]) -> dict[str, float]:
    """``delta/<key>``, ``delta_ci_low/<key>``, ``delta_ci_high/<key>``, ``delta_p/<key>`` of each row."""
    out: dict[str, float] = {}
    for r in rows:
        d = r.diff
        for figure, value in zip(m.COMPARISON_FIGURES, (d.delta, d.ci_low, d.ci_high, d.p_value), strict=True):
            out[m.comparison_key(figure, r.metric, r.scope)] = value
    return out


def log_comparison(
    store: Store,
    a: RunSummary,
    b: RunSummary,
    rows: list[MetricRow],
    changes: list[ItemChange],
    text: str,
    cautions: list[str],
    ppi: PPIReport | None = None,
) -> str:
    """A ``compare`` run holding the table, the item changes, the cautions and the per-type plot, and
    with human labels their prediction-powered Δ (``ppi_delta/*`` metrics) and the label file as a dataset.

    Comparing the same two eval runs again, with the same label file, returns the run logged the first
    time (the figures are a pure function of the two runs' records and the labels): no duplicate runs,
    and no plot to redraw.
    """
    labels = ppi.file.digest if ppi is not None and ppi.used else "none"
    existing = store.comparison_run(a.run_id, b.run_id, labels)
    if existing:
        return existing
    run_id = store.start_run(
        f"compare {a.version} vs {b.version}",
        {
            "a_version": a.version,
            "b_version": b.version,
            "a_run": a.run_id,
            "b_run": b.run_id,
            "golden_digest": b.golden_digest,
            "judge_identity": b.judge_identity,
            "human_labels_digest": labels,
        },
        {Tag.KIND: "compare", Tag.VERSIONS: f"{a.version},{b.version}"},
        experiment_id=store.decisions_experiment_id,
    )
    metrics = comparison_metrics(rows) | (ppi.metrics(DELTA) if ppi is not None else {})
    store.log_metrics(run_id, {k: metrics[k] for k in m.display_order(metrics)})
    if ppi is not None and ppi.used:
        log_human_labels(store, run_id, ppi)
    store.describe_run(run_id, descriptions.comparison(a, b, rows, changes, cautions, ppi))
    store.log_json(
        run_id,
        "comparison.json",
        {
            "a_run": a.run_id,
            "b_run": b.run_id,
            "rows": [{"metric": r.metric, "scope": r.scope, "items": r.items_total, **vars(r.diff)} for r in rows],
            "changed_items": [{**vars(c), "delta": c.delta} for c in changes],
            "ppi": ppi.to_json() if ppi else None,
        },
    )
    store.log_text(run_id, "comparison.md", text)
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "per_type.png"
        per_type_plot([a, b], png)
        store.log_file(run_id, png)
    store.finish_run(run_id)
    return run_id
