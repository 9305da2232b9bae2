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
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import mlflow
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import DatasetInput, InputTag
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from ragtrack.agent import Agent
from ragtrack.corpus import Corpus
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.golden import GoldenSet, Staleness
from ragtrack.records import ItemRecord
from ragtrack.spec import LoadedSpec
from ragtrack.tracking.models import ModelRef
from ragtrack.tracking.store import Param, Store, Tag

log = logging.getLogger(__name__)


def eval_tags(spec: LoadedSpec, golden: GoldenSet, panel: JudgePanel, agent: Agent, model: ModelRef) -> dict[str, str]:
    """The tags compare/promote/versions search eval runs by."""
    return {
        Tag.KIND: "eval",
        Tag.VERSION: spec.name,
        Tag.AGENT_KIND: spec.kind,
        Tag.SPEC_HASH: spec.hash,
        Tag.GOLDEN_DIGEST: golden.digest,
        Tag.JUDGE_IDENTITY: panel.identity,
        Tag.SUBSTITUTED: str(agent.substituted).lower(),
        Tag.MODEL_VERSION: model.version,
        Tag.MODEL_ID: model.model_id,
        **{Tag.warning(code): message for code, message in agent.setup.warnings.items()},
    }


def eval_params(
    spec: LoadedSpec,
    corpus: Corpus,
    golden: GoldenSet,
    panel: JudgePanel,
    agent: Agent,
    model: ModelRef,
    min_overlap: float,
) -> dict[str, str]:
    """An eval run's params: inputs, judge, what the agent ran with, and its spec (``spec.*``)."""
    return {
        "version": spec.name,
        "spec_hash": spec.hash,
        "model_version": model.version,
        "golden_path": golden.source,
        "golden_digest": golden.digest,
        "golden_items": str(len(golden)),
        "corpus_digest": corpus.digest,
        "corpus_passages": str(len(corpus)),
        "judge": panel.label,
        "judge_identity": panel.identity,
        "judge_language": panel.language,
        Param.MIN_OVERLAP: str(min_overlap),
        "agent_kind": spec.kind,
        **agent.describe(),
        **{f"spec.{k}": v for k, v in spec.params().items() if k != "spec_hash"},
    }


def record_eval(
    store: Store,
    run_id: str,
    model_id: str | None,
    records: list[ItemRecord],
    metrics: dict[str, float],
    diagnosis: str,
    accounting: dict,
) -> None:
    """Everything an eval run keeps: metrics (linked to the version's model), per-item records, diagnosis."""
    store.log_metrics(run_id, metrics, model_id)
    log_items(store, run_id, records)
    store.log_text(run_id, "diagnosis.md", diagnosis)
    store.log_json(run_id, "accounting.json", accounting)
    log_genai_records(store, run_id, model_id, records)


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
    retrieval_keys = list(dict.fromkeys(k for r in records for k in r.retrieval))
    for r in records:
        cols["id"].append(r.id)
        cols["type"].append(r.type)
        cols["question"].append(r.question)
        cols["answer"].append(r.answer)
        cols["gt_answer"].append(r.gt_answer)
        cols["retrieved_chunk_ids"].append(r.retrieved_unit_ids)
        cols["retrieved_passage_ids"].append(r.retrieved_passage_ids)
        cols["gt_context_ids"].append(r.gt_context_ids)
        for metric in retrieval_keys:  # None where the reply said nothing about retrieval
            cols.setdefault(metric, []).append(r.retrieval.get(metric))
        cols.setdefault("unmapped", []).append(r.unmapped)
        cols.setdefault("errors", []).append(r.errors)
        for judge, v in r.judges.items():
            cols.setdefault(judge, []).append(v.score)
            cols.setdefault(f"{judge}_reason", []).append(v.reason or (f"ERROR: {v.error}" if v.error else ""))
    return cols


def log_items(store: Store, run_id: str, records: list[ItemRecord]) -> None:
    store.log_json(run_id, "items_table.json", items_table(records))
    store.log_text(run_id, "items.jsonl", "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records))


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
            value = by_id[inputs["item_id"]].retrieval.get(metric)
            return None if value is None else float(value)

        return _score

    judges = sorted({j for r in records for j in r.judges})
    scorers = [judge_scorer(j) for j in judges] + [
        retrieval_scorer(m.RETRIEVAL.get(name).item_key) for name in ("context_recall", "context_precision", "mrr")
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


class GoldenDataset(MetaDataset):
    """A golden set as a metadata-only MLflow dataset, with a profile (item counts) beside name and digest."""

    def __init__(self, source: DatasetSource, name: str, digest: str, profile: dict):
        self._profile = profile
        super().__init__(source, name=name, digest=digest)

    @property
    def profile(self) -> dict:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile, ensure_ascii=False)}


def log_golden_dataset(store: Store, run_id: str, golden: GoldenSet, stale: list[Staleness]) -> None:
    """The golden set as the run's named MLflow dataset input (the UI's Datasets column).

    Name = the golden file's stem, digest = the golden digest (the comparability
    key), source = the file, profile = item count, items per type, the corpus
    digest and the items scored with stale GT under ``--allow-stale``. Logging
    the same dataset again (a resumed run) adds nothing.
    """
    path = os.path.abspath(golden.source)
    with warnings.catch_warnings():  # MLflow registers the local-file source twice and says so
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(path)
    types = Counter(i.type for i in golden.items)
    profile = {
        "items": len(golden),
        "types": {t: types[t] for t in sorted(types)},
        "corpus_digest": golden.corpus_digest,
        "stale_items": [s.item_id for s in stale],
    }
    name = os.path.splitext(os.path.basename(path))[0]
    dataset = GoldenDataset(source, name, golden.digest, profile)._to_mlflow_entity()
    store.client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "eval")])])
