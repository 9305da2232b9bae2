"""Logging a comparison of two eval runs: the table, the items that moved, a per-type plot."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow
from ragtrack.records import RunSummary
from ragtrack.tracking.store import Store, Tag


def per_type_plot(
    a: RunSummary,
    b: RunSummary,
    path: Path,
    metrics: tuple[str, ...] = ("context_recall", "mrr", "correctness_norm", "groundedness_norm"),
) -> None:
    """Bars per question type for both versions, one panel per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = [t for t in m.TYPES if m.key("items", t) in b.metrics]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.4), sharey=True)
    for ax, metric in zip(axes, metrics, strict=True):
        xs = range(len(types))
        va = [a.metrics.get(m.key(metric, t), 0.0) for t in types]
        vb = [b.metrics.get(m.key(metric, t), 0.0) for t in types]
        ax.bar([x - 0.2 for x in xs], va, width=0.4, label=a.version)
        ax.bar([x + 0.2 for x in xs], vb, width=0.4, label=b.version)
        ax.set_xticks(list(xs), [f"type {t}" for t in types])
        ax.set_title(metric)
        ax.set_ylim(0, 1)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def log_comparison(
    store: Store, a: RunSummary, b: RunSummary, rows: list[MetricRow], changes: list[ItemChange], text: str
) -> str:
    """A ``compare`` run holding the table, the item changes and the per-type plot."""
    run_id = store.start_run(
        f"compare {a.version} vs {b.version}",
        {
            "a_version": a.version,
            "b_version": b.version,
            "a_run": a.run_id,
            "b_run": b.run_id,
            "golden_digest": b.golden_digest,
            "judge_identity": b.judge_identity,
        },
        {Tag.KIND: "compare", Tag.VERSIONS: f"{a.version},{b.version}"},
        experiment_id=store.decisions_experiment_id,
    )
    metrics = {}
    for r in rows:
        name = m.key(r.metric, r.scope)
        metrics[f"delta/{name}"] = r.diff.delta
        metrics[f"ci_low/{name}"] = r.diff.ci_low
        metrics[f"ci_high/{name}"] = r.diff.ci_high
    store.log_metrics(run_id, metrics)
    store.log_json(
        run_id,
        "comparison.json",
        {
            "a_run": a.run_id,
            "b_run": b.run_id,
            "rows": [{"metric": r.metric, "scope": r.scope, "items": r.items_total, **vars(r.diff)} for r in rows],
            "changed_items": [{**vars(c), "delta": c.delta} for c in changes],
        },
    )
    store.log_text(run_id, "comparison.md", text)
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "per_type.png"
        per_type_plot(a, b, png)
        store.log_file(run_id, png)
    store.finish_run(run_id)
    return run_id
