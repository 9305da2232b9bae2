"""Eval runs in MLflow: params, metrics linked to the version's model, per-item records, the run's story.

An eval run keeps, for four readers:

* its overview page: a Markdown description (scores overall and per type,
  judge, substitutions, diagnosis, and the paired comparison with the champion
  with what ``promote`` would decide), the metrics in reading order (headline
  first, the champion comparison as ``delta/*`` metrics, LLM accounting last);
* its evaluation view: one trace per item (:mod:`ragtrack.tracking.traces`);
* its artifacts: ``items_table.json`` (a table MLflow's artifact viewer shows
  as one), ``per_type.png`` (this version per question type, beside the
  champion when there is one), ``diagnosis.md``, ``accounting.json``;
* scripts: ``items.jsonl`` with everything, raw judge replies included.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
from mlflow.entities import LoggedModelInput

from ragtrack.agent import Agent
from ragtrack.corpus import Corpus
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.human_labels import PPIReport
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.promotion import Rule
from ragtrack.golden import GoldenSet
from ragtrack.records import ItemRecord
from ragtrack.spec import LoadedSpec
from ragtrack.tracking import datasets, standings, traces
from ragtrack.tracking.models import ModelRef
from ragtrack.tracking.store import GENAI_EVALUATE, Param, Store, Tag


def eval_tags(
    spec: LoadedSpec,
    golden: GoldenSet,
    panel: JudgePanel,
    agent: Agent,
    model: ModelRef,
    full: GoldenSet,
    limits: dict[str, str],
) -> dict[str, str]:
    """The tags compare/promote/versions search eval runs by, and the cautions its description shows
    (``full``: the golden set before a ``--limit`` cut it to ``golden``; ``limits``: what the cut left
    out, stale GT let through, by code; the agent's warnings)."""
    cut = len(golden) < len(full)
    return {
        Tag.RUN_TYPE: GENAI_EVALUATE,
        Tag.KIND: "eval",
        Tag.VERSION: spec.name,
        Tag.AGENT_KIND: spec.kind,
        Tag.SPEC_HASH: spec.hash,
        Tag.GOLDEN_DIGEST: golden.digest,
        Tag.JUDGE_IDENTITY: panel.identity,
        **({Tag.JUDGE_ALIGNED: panel.aligned} if panel.aligned else {}),
        Tag.SUBSTITUTED: str(agent.substituted).lower(),
        Tag.MODEL_VERSION: model.version,
        Tag.MODEL_ID: model.model_id,
        **{Tag.warning(code): message for code, message in agent.setup.warnings.items()},
        **{Tag.warning(code): message for code, message in limits.items()},
        **({Tag.LIMITED: f"{len(golden)} of {len(full)}"} if cut else {}),
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
    ran = agent.describe()
    return {
        "version": spec.name,
        "spec_hash": spec.hash,
        "model_version": model.version,
        "golden_path": golden.source,
        "golden_digest": golden.digest,
        "golden_items": str(len(golden)),
        "corpus_path": corpus.source,  # which folder or file: a --corpus run is told apart by more than a digest
        "corpus_digest": corpus.digest,
        "corpus_passages": str(len(corpus)),
        "judge": panel.label,
        "judge_identity": panel.identity,
        "judge_samples": str(panel.samples),
        "judge_aligned": panel.aligned or "no",  # the aligned judge's digest (ragtrack judge align)
        "judge_language": panel.language,
        Param.MIN_OVERLAP: str(min_overlap),
        Param.RANK_CUTOFF: str(agent.top_k) if agent.top_k else "contexts",
        "agent_kind": spec.kind,
        **ran,
        **as_run(ran, {f"spec.{k}": v for k, v in spec.params().items() if k != "spec_hash"}),
    }


def as_run(ran: dict[str, str], spec_params: dict[str, str]) -> dict[str, str]:
    """``spec_params`` with each substituted stage's model said as it ran: ``spec.rerank.model`` reads
    ``skipped (…)`` when the reranker did not run, so a chart or a parameter diff over it is not told
    that a reranker ran (``ran``: the agent's ``describe()``, with ``<stage>_model[_requested]``)."""
    out = dict(spec_params)
    for key, requested in ran.items():
        stage = key.removesuffix("_model_requested")
        used, spec_key = ran.get(f"{stage}_model"), f"spec.{stage}.model"
        if stage != key and used not in (None, requested) and spec_key in out:
            out[spec_key] = (
                f"skipped ({requested} not available)" if used == "none" else f"{used} (substitute for {requested})"
            )
    return out


def record_eval(
    store: Store,
    run_id: str,
    model_id: str | None,
    records: list[ItemRecord],
    metrics: dict[str, float],
    diagnosis: str,
    accounting: dict,
    rule: Rule | None = None,
    ppi: PPIReport | None = None,
) -> None:
    """Everything an eval run keeps and shows (see the module docstring); safe to call again on a resumed run.

    ``rule`` is the promotion rule the description's dry decision applies (default: margin and tolerance 0);
    ``ppi`` the human labels' figures (``metrics`` carries them), whose label file becomes a dataset input.
    """
    params = store.client.get_run(run_id).data.params
    run = replace(store.run_summary(run_id), metrics=metrics)
    complete = len(records) == int(params.get("golden_items", len(records)))
    standing = standings.standing(store, run, rule or Rule(), records) if complete and records else None
    # The description reads the figures as the run logs them (three decimals), as it does when re-written.
    shown = {k: m.for_display(v) for k, v in {**metrics, **standings.deltas(standing)}.items()}
    store.log_metrics(run_id, {k: shown[k] for k in m.display_order(shown)}, model_id)
    log_items(store, run_id, records, table=complete)
    store.log_text(run_id, "diagnosis.md", diagnosis)
    store.log_json(run_id, "accounting.json", accounting)
    _log_model_input(store, run_id, model_id)
    if ppi is not None and ppi.used:
        datasets.log_human_labels(store, run_id, ppi)
    traces.log_traces(store, run, model_id, records, params.get("judge", ""))
    standings.describe_eval(store, replace(run, metrics=shown), params, records, diagnosis, standing, model_id)


def _log_model_input(store: Store, run_id: str, model_id: str | None) -> None:
    """The version's LoggedModel as the run's model input (once): its page lists the run among its runs."""
    if model_id and model_id not in {i.model_id for i in store.client.get_run(run_id).inputs.model_inputs or ()}:
        store.client.log_inputs(run_id, models=[LoggedModelInput(model_id)])


def items_table(records: list[ItemRecord]) -> dict[str, list]:
    """One row per item: what a reviewer scans (scores, answer, reference, judge reasons, passages).

    A retrieval metric is None where the agent's reply did not say what it retrieved.
    """
    judges = list(dict.fromkeys(j for r in records for j in r.judges))
    retrieval_keys = list(dict.fromkeys(k for r in records for k in r.retrieval))
    cols: dict[str, list] = {k: [] for k in ("id", "type", "question", *judges, *retrieval_keys)}
    for r in records:
        cols["id"].append(r.id)
        cols["type"].append(r.type)
        cols["question"].append(r.question)
        for judge in judges:
            cols[judge].append(r.judges[judge].score if judge in r.judges else None)
        for metric in retrieval_keys:
            cols[metric].append(r.retrieval.get(metric))
        cols.setdefault("answer", []).append(r.answer)
        cols.setdefault("gt_answer", []).append(r.gt_answer)
        for judge in judges:
            v = r.judges.get(judge)
            reason = (v.reason or (f"ERROR: {v.error}" if v.error else "")) if v else ""
            cols.setdefault(f"{judge}_reason", []).append(reason)
        cols.setdefault("retrieved_passage_ids", []).append(r.retrieved_passage_ids)
        cols.setdefault("gt_context_ids", []).append(r.gt_context_ids)
        cols.setdefault("retrieved_chunk_ids", []).append(r.retrieved_unit_ids)
        cols.setdefault("unmapped", []).append(r.unmapped)
        cols.setdefault("errors", []).append("; ".join(r.errors))
    return cols


ITEMS_TABLE = "items_table.json"


def log_items(store: Store, run_id: str, records: list[ItemRecord], table: bool = True) -> None:
    """``items.jsonl`` (everything) and, when ``table``, ``items_table.json`` as an MLflow table.

    MLflow appends to a table that exists, so a run gets its table once: when it is
    complete (a resumed run rewrites ``items.jsonl`` but never doubles the table).
    """
    store.log_text(run_id, "items.jsonl", "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records))
    if table and records and ITEMS_TABLE not in {f.path for f in store.client.list_artifacts(run_id)}:
        store.client.log_table(run_id, data=pd.DataFrame(items_table(records)), artifact_file=ITEMS_TABLE)
