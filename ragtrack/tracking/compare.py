"""Logging a comparison of two eval runs: the table, the items that moved (a regressions table), a per-type plot."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow
from ragtrack.evaluation.human_labels import DELTA, PPIReport
from ragtrack.evaluation.judges import JUDGES
from ragtrack.records import ItemRecord, RunSummary
from ragtrack.tracking import descriptions
from ragtrack.tracking.datasets import log_human_labels
from ragtrack.tracking.store import Store, Tag
from ragtrack.tracking.traces import item_traces, retrieval_rationale


def per_type_plot(
    runs: list[RunSummary],
    path: Path,
    metrics: tuple[str, ...] = ("norm/correctness", "norm/groundedness", "context_recall", "mrr"),
) -> None:
    """Bars per question type (and over all items) for one run or two side by side, one panel per metric.

    Drawn on a bare ``Figure`` rather than through pyplot: no global backend switch in the
    caller's process, and no pyplot import (a third of the plot's cost). Its margins are fixed, in
    inches, rather than fitted by ``tight_layout`` or a layout engine, which lay the figure out in a
    drawing pass of their own before ``savefig`` draws it (a quarter of the plot's cost): its labels
    are short and the same every time (scores 0–1, "type X"), so the fit is known beforehand.
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
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.45 / w, right=1 - 0.1 / w, bottom=0.35 / h, top=1 - 0.3 / h, wspace=0.05)
    fig.savefig(path, dpi=110)


#: The table artifact of the items whose scores moved between two versions (compare runs, and eval
#: runs compared with the champion).
REGRESSIONS_TABLE = "regressions.json"
#: What it lists: every judge, with its reason, and context recall, with the GT passages found.
REGRESSION_METRICS = (*JUDGES.names(), "context_recall")


def regressions(
    a: str,
    b: str,
    records: tuple[list[ItemRecord], list[ItemRecord]],
    changes: Iterable[ItemChange],
    traces: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> dict[str, list]:
    """The items whose score moved from version ``a`` to ``b``, largest drop first (gains last): per item
    and metric both scores and both reasons side by side, columns labelled by version, and the two
    traces' routes in the UI (``traces``: item ID → route, per side) and each side's first failing node."""
    by_id = [{r.id: r for r in side} for side in records]
    rows = sorted((c for c in changes if c.metric in REGRESSION_METRICS), key=lambda c: (c.delta, c.id, c.metric))
    names = ("item", "metric", "Δ", f"{a} score", f"{b} score", f"{a} reason", f"{b} reason", "type")
    # Each side's first failing node (evaluation.nodes): which node to look at for the item that dropped.
    failing = (f"{a} first failing node", f"{b} first failing node")
    table: dict[str, list] = {name: [] for name in (*names, f"{a} trace", f"{b} trace", "question", *failing)}
    for c in rows:
        reasons = [_reason(side[c.id], c.metric) if c.id in side else "" for side in by_id]
        routes = [route.get(c.id, "") for route in traces]
        nodes = [side[c.id].first_failing if c.id in side else "" for side in by_id]
        values = (c.id, c.metric, round(c.delta, 3), c.a, c.b, *reasons, c.type, *routes, c.question, *nodes)
        for name, value in zip(table, values, strict=True):
            table[name].append(value)
    return table


def _reason(record: ItemRecord, metric: str) -> str:
    if metric in record.judges:
        verdict = record.judges[metric]
        return verdict.reason or (f"ERROR: {verdict.error}" if verdict.error else "")
    return retrieval_rationale(record)


def log_regressions(
    store: Store,
    run_id: str,
    a: RunSummary,
    b: RunSummary,
    records: tuple[list[ItemRecord], list[ItemRecord]],
    changes: Iterable[ItemChange],
) -> dict[str, list]:
    """:func:`regressions` of ``a`` → ``b`` as ``run_id``'s :data:`REGRESSIONS_TABLE` (replacing an earlier one)."""
    links = descriptions.Links(store.registered_model, store.experiment_id)
    traces = tuple(
        {item: links.trace(found[0].trace_id) for item, found in item_traces(store, run.run_id).items()}
        for run in (a, b)
    )
    same = a.version == b.version  # an edited spec against the champion of its name: label by model version
    labels = (f"{a.version}@{a.model_version}", f"{b.version}@{b.model_version}") if same else (a.version, b.version)
    table = regressions(*labels, records, changes, traces)
    store.write_table(run_id, REGRESSIONS_TABLE, table)
    return table


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
    records: tuple[list[ItemRecord], list[ItemRecord]] = ([], []),
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
    table = log_regressions(store, run_id, a, b, records, changes)
    links = descriptions.Links(store.registered_model)
    route = links.artifact(store.decisions_experiment_id, run_id, REGRESSIONS_TABLE)
    store.describe_run(
        run_id, descriptions.comparison(a, b, rows, changes, cautions, ppi, descriptions.regressions_line(table, route))
    )
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
