"""Eval runs in MLflow: params, metrics linked to the version's model, per-item records.

Per-item results are logged three ways, for three readers:

* MLflow 3's GenAI evaluation records (``mlflow.genai.evaluate`` over the
  precomputed answers, with ragtrack scorers that return the verdicts already
  made): the run page's evaluation view shows each question, answer, score and
  judge reason;
* a table artifact (``items_table.json``) for MLflow's artifact viewer;
* ``items.jsonl`` with everything, raw judge replies included, for scripts.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import asdict
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from ragtrack.evaluation.runner import ItemRecord
from ragtrack.tracking.store import Store

log = logging.getLogger(__name__)

KIND_TAG = "ragtrack.kind"


def eval_tags(
    *,
    version: str,
    spec_hash: str,
    golden_digest: str,
    judge_identity: str,
    substituted: bool,
    model_version: str,
    model_id: str,
) -> dict[str, str]:
    """The tags compare/promote/versions search eval runs by."""
    return {
        KIND_TAG: "eval",
        "ragtrack.version": version,
        "ragtrack.spec_hash": spec_hash,
        "ragtrack.golden_digest": golden_digest,
        "ragtrack.judge_identity": judge_identity,
        "ragtrack.substituted": str(substituted).lower(),
        "ragtrack.model_version": model_version,
        "ragtrack.model_id": model_id,
    }


def start_run(
    store: Store,
    name: str,
    params: dict[str, str],
    tags: dict[str, str],
    run_id: str | None = None,
    experiment_id: str | None = None,
) -> str:
    """Create a run (or reopen ``run_id`` to resume it) and log its params and tags."""
    client = store.client
    if run_id is not None:
        try:
            client.update_run(run_id, status="RUNNING")
        except MlflowException:  # the store was wiped since the checkpoint was written
            run_id = None
    if run_id is None:
        run_id = client.create_run(experiment_id or store.experiment_id, run_name=name, tags=tags).info.run_id
    params = {k: str(v)[:6000] for k, v in params.items()}
    items = list(params.items())
    for i in range(0, len(items), 100):  # the store takes at most 100 params per batch
        client.log_batch(run_id, params=[Param(k, v) for k, v in items[i : i + 100]])
    client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
    return run_id


def log_metrics(store: Store, run_id: str, metrics: dict[str, float], model_id: str | None = None) -> None:
    """One batched write (per-metric calls are ~50× slower on SQLite); linked to the model."""
    now = int(time.time() * 1000)
    rows = [Metric(k, float(v), now, 0, model_id=model_id) for k, v in sorted(metrics.items())]
    for i in range(0, len(rows), 1000):
        store.client.log_batch(run_id, metrics=rows[i : i + 1000])


def log_json(store: Store, run_id: str, name: str, payload: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        store.client.log_artifact(run_id, str(path))


def log_text(store: Store, run_id: str, name: str, text: str) -> None:
    store.client.log_text(run_id, text, name)


def items_table(records: list[ItemRecord]) -> dict[str, list]:
    """Column-oriented per-item table: the view a reviewer scans."""
    cols: dict[str, list] = {
        k: []
        for k in (
            "id",
            "type",
            "question",
            "answer",
            "gt_answer",
            "retrieved_chunk_ids",
            "retrieved_passage_ids",
            "gt_context_ids",
        )
    }
    for r in records:
        cols["id"].append(r.id)
        cols["type"].append(r.type)
        cols["question"].append(r.question)
        cols["answer"].append(r.answer)
        cols["gt_answer"].append(r.gt_answer)
        cols["retrieved_chunk_ids"].append(r.retrieved_unit_ids)
        cols["retrieved_passage_ids"].append(r.retrieved_passage_ids)
        cols["gt_context_ids"].append(r.gt_context_ids)
        for metric, value in r.retrieval.items():
            cols.setdefault(metric, []).append(value)
        for judge, v in r.judges.items():
            cols.setdefault(judge, []).append(v.score)
            cols.setdefault(f"{judge}_reason", []).append(v.reason or (f"ERROR: {v.error}" if v.error else ""))
    return cols


def log_items(store: Store, run_id: str, records: list[ItemRecord]) -> None:
    log_json(store, run_id, "items_table.json", items_table(records))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "items.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")
        store.client.log_artifact(run_id, str(path))


def log_genai_records(store: Store, run_id: str, model_id: str | None, records: list[ItemRecord]) -> None:
    """Per-item evaluation records in MLflow's own evaluation view (no model is called)."""
    if not records:
        return
    from mlflow.entities import Feedback
    from mlflow.genai.scorers import scorer

    by_id = {r.id: r for r in records}

    def judge_scorer(judge: str):
        @scorer(name=judge)
        def _score(inputs, outputs):
            v = by_id[inputs["item_id"]].judges.get(judge)
            if v is None:
                return None
            if v.score is None:
                return Feedback(name=judge, error=f"judge error: {v.error}")
            return Feedback(name=judge, value=v.score, rationale=v.reason)

        return _score

    def retrieval_scorer(metric: str):
        @scorer(name=metric)
        def _score(inputs, outputs):
            return float(by_id[inputs["item_id"]].retrieval[metric])

        return _score

    judges = sorted({j for r in records for j in r.judges})
    scorers = [judge_scorer(j) for j in judges] + [
        retrieval_scorer(m) for m in ("context_recall", "context_precision", "reciprocal_rank")
    ]
    data = [
        {
            "inputs": {"question": r.question, "item_id": r.id, "type": r.type},
            "outputs": {"answer": r.answer, "retrieved_passage_ids": r.retrieved_passage_ids},
            "expectations": {"expected_response": r.gt_answer, "gt_context_ids": r.gt_context_ids},
        }
        for r in records
    ]
    # MLflow's defaults (10 rows × 10 scorers in parallel, async trace export) exhaust a
    # SQLite store's connection pool; the scorers only look values up, so run them serially.
    # Its own progress bar and banner would interleave with ragtrack's: they are swallowed
    # (warnings go through logging, which keeps its own stream).
    with (
        _env(
            MLFLOW_GENAI_EVAL_MAX_WORKERS="1",
            MLFLOW_GENAI_EVAL_MAX_SCORER_WORKERS="1",
            MLFLOW_ENABLE_ASYNC_TRACE_LOGGING="false",
        ),
        redirect_stdout(io.StringIO()),
        redirect_stderr(io.StringIO()),
        mlflow.start_run(run_id=run_id),
    ):
        mlflow.genai.evaluate(data=data, scorers=scorers, model_id=model_id)


@contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def finish_run(store: Store, run_id: str, complete: bool) -> None:
    store.client.set_tag(run_id, "ragtrack.complete", str(complete).lower())
    store.client.set_terminated(run_id, "FINISHED" if complete else "KILLED")
