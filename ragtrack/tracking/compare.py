"""Finding comparable eval runs in MLflow, and logging a comparison run.

Two eval runs are comparable only when they scored the same golden set (same
content digest, which covers the corpus), with the same judge (backend, model,
prompt hash, temperature) and the same ID-mapping threshold. Runs whose
models were substituted (a model the spec names was not available) are
flagged: they measured something other than the version as specified.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow

from ragtrack.errors import RagtrackError
from ragtrack.evaluation.compare import ItemChange, MetricRow
from ragtrack.evaluation.runner import ItemRecord
from ragtrack.tracking import runs
from ragtrack.tracking.store import Store


@dataclass(frozen=True)
class EvalRun:
    run_id: str
    version: str
    golden_digest: str
    judge_identity: str
    min_overlap: str
    substituted: bool
    model_version: str
    metrics: dict[str, float]
    started: int

    @classmethod
    def from_mlflow(cls, run) -> EvalRun:
        tags, params = run.data.tags, run.data.params
        return cls(
            run_id=run.info.run_id,
            version=tags.get("ragtrack.version", "?"),
            golden_digest=tags.get("ragtrack.golden_digest", ""),
            judge_identity=tags.get("ragtrack.judge_identity", ""),
            min_overlap=params.get("mapping_min_overlap", ""),
            substituted=tags.get("ragtrack.substituted") == "true",
            model_version=tags.get("ragtrack.model_version", ""),
            metrics=dict(run.data.metrics),
            started=run.info.start_time,
        )


def find_eval_runs(
    store: Store, version: str | None = None, golden_digest: str | None = None, judge_identity: str | None = None
) -> list[EvalRun]:
    """Complete eval runs, newest first, optionally filtered."""
    clauses = [f"tags.`{runs.KIND_TAG}` = 'eval'", "tags.`ragtrack.complete` = 'true'"]
    if version:
        clauses.append(f"tags.`ragtrack.version` = '{version}'")
    if golden_digest:
        clauses.append(f"tags.`ragtrack.golden_digest` = '{golden_digest}'")
    if judge_identity:
        clauses.append(f"tags.`ragtrack.judge_identity` = '{judge_identity}'")
    found = store.client.search_runs(
        [store.experiment_id], " and ".join(clauses), order_by=["attributes.start_time DESC"], max_results=500
    )
    return [EvalRun.from_mlflow(r) for r in found]


def latest_eval_run(
    store: Store, version: str, golden_digest: str | None = None, judge_identity: str | None = None
) -> EvalRun:
    found = find_eval_runs(store, version, golden_digest, judge_identity)
    if not found:
        detail = "".join(
            [
                f" on golden digest {golden_digest}" if golden_digest else "",
                f" with judge {judge_identity}" if judge_identity else "",
            ]
        )
        raise RagtrackError(f"no complete eval run of {version}{detail}; run: ragtrack eval --version {version}")
    return found[0]


def comparability_problems(a: EvalRun, b: EvalRun) -> list[str]:
    problems = []
    if a.golden_digest != b.golden_digest:
        problems.append(f"different golden sets (digest {a.golden_digest} vs {b.golden_digest})")
    if a.judge_identity != b.judge_identity:
        problems.append(f"different judges ({a.judge_identity} vs {b.judge_identity})")
    if a.min_overlap != b.min_overlap:
        problems.append(f"different ID-mapping thresholds ({a.min_overlap} vs {b.min_overlap})")
    return problems


def load_records(store: Store, run_id: str) -> list[ItemRecord]:
    path = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="items.jsonl", tracking_uri=store.tracking_uri
    )
    return [ItemRecord.from_json(json.loads(line)) for line in Path(path).read_text("utf-8").splitlines() if line]


def per_type_plot(
    a: EvalRun,
    b: EvalRun,
    path: Path,
    metrics: tuple[str, ...] = ("context_recall", "mrr", "correctness_norm", "groundedness_norm"),
) -> None:
    """Bars per question type for both versions, one panel per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = [t for t in "ABCD" if f"items/type_{t}" in b.metrics]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.4), sharey=True)
    for ax, metric in zip(axes, metrics, strict=True):
        xs = range(len(types))
        va = [a.metrics.get(f"{metric}/type_{t}", 0.0) for t in types]
        vb = [b.metrics.get(f"{metric}/type_{t}", 0.0) for t in types]
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
    store: Store, a: EvalRun, b: EvalRun, rows: list[MetricRow], changes: list[ItemChange], text: str
) -> str:
    """A ``compare`` run holding the table, the item changes and the per-type plot."""
    run_id = runs.start_run(
        store,
        f"compare {a.version} vs {b.version}",
        {
            "a_version": a.version,
            "b_version": b.version,
            "a_run": a.run_id,
            "b_run": b.run_id,
            "golden_digest": b.golden_digest,
            "judge_identity": b.judge_identity,
        },
        {runs.KIND_TAG: "compare", "ragtrack.versions": f"{a.version},{b.version}"},
        experiment_id=store.decisions_experiment_id,
    )
    metrics = {}
    for r in rows:
        key = f"{r.metric}/{r.scope}"
        metrics[f"delta/{key}"] = r.diff.delta
        metrics[f"ci_low/{key}"] = r.diff.ci_low
        metrics[f"ci_high/{key}"] = r.diff.ci_high
    runs.log_metrics(store, run_id, metrics)
    runs.log_json(
        store,
        run_id,
        "comparison.json",
        {
            "a_run": a.run_id,
            "b_run": b.run_id,
            "rows": [{"metric": r.metric, "scope": r.scope, "items": r.items_total, **vars(r.diff)} for r in rows],
            "changed_items": [{**vars(c), "delta": c.delta} for c in changes],
        },
    )
    runs.log_text(store, run_id, "comparison.md", text)
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "per_type.png"
        per_type_plot(a, b, png)
        store.client.log_artifact(run_id, str(png))
    runs.finish_run(store, run_id, complete=True)
    return run_id
