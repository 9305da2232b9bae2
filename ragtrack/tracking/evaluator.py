"""ragtrack as an MLflow evaluator plugin, for users who live in MLflow's own API.

Registered under the ``mlflow.model_evaluator`` entry point group, so

    mlflow.models.evaluate(
        "models:/rag-agent@champion", data=df, model_type="question-answering",
        evaluators=["ragtrack"],
        evaluator_config={"ragtrack": {"judge": "offline", "k": 5}},
    )

scores a retrieval-augmented model with ragtrack's ID-based retrieval metrics
and judges. ``data`` has a question column and, per row, the GT context IDs
and GT answer (column names configurable; ``type`` is optional). The model
must return, per question, a dict with ``answer`` and ``retrieved_ids`` (as
ragtrack's own logged versions do) — or pass precomputed ``predictions``.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.models.evaluation import EvaluationResult, ModelEvaluator

from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.judges import JUDGES, JudgeInput, judge_steps
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.evaluation.runner import ItemRecord, JudgeRecord

DEFAULTS = {
    "question_col": "question",
    "gt_ids_col": "gt_context_ids",
    "gt_answer_col": "gt_answer",
    "type_col": "type",
    "judge": "offline",
    "language": "en",
    "k": 5,
}


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return [str(v) for v in value]


class RagtrackEvaluator(ModelEvaluator):
    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        return model_type in ("question-answering", "retriever", None)

    def evaluate(self, *, model_type, dataset, run_id, evaluator_config, model=None, predictions=None, **kwargs):
        from mlflow import MlflowClient

        from ragtrack.config import ProjectConfig
        from ragtrack.llm import make_llm
        from ragtrack.tracking import runs
        from ragtrack.tracking.store import Store

        cfg = {**DEFAULTS, **(evaluator_config or {})}
        frame = dataset.features_data.copy()
        if dataset.labels_data is not None and cfg["gt_ids_col"] not in frame:
            frame[cfg["gt_ids_col"]] = list(dataset.labels_data)
        questions = frame[cfg["question_col"]].astype(str).tolist()
        outputs = list(model.predict(questions)) if model is not None else list(dataset.predictions_data)
        llm = make_llm(cfg["judge"], ProjectConfig())
        steps = judge_steps(cfg["language"])
        records = []
        for n, (question, out) in enumerate(zip(questions, outputs, strict=True)):
            out = out if isinstance(out, dict) else {"answer": str(out), "retrieved_ids": []}
            gt_ids = _as_list(frame[cfg["gt_ids_col"]].iloc[n])
            retrieved = _as_list(out.get("retrieved_ids", []))
            contexts = tuple(out.get("contexts", ()))
            gt_answer = str(frame[cfg["gt_answer_col"]].iloc[n]) if cfg["gt_answer_col"] in frame else ""
            inp = JudgeInput(question, str(out.get("answer", "")), gt_answer, contexts)
            verdicts = {}
            for name, step in steps.items():
                result = llm.run(step, inp)
                verdicts[name] = (
                    JudgeRecord(result.value.score, result.value.normalized, result.value.reason)
                    if result.ok
                    else JudgeRecord(None, None, "", error=result.error, raw=result.raw)
                )
            records.append(
                ItemRecord(
                    id=str(n),
                    type=str(frame[cfg["type_col"]].iloc[n]) if cfg["type_col"] in frame else "A",
                    question=question,
                    gt_context_ids=gt_ids,
                    gt_answer=inp.gt_answer,
                    answer=inp.answer,
                    retrieved_unit_ids=[],
                    retrieved_passage_ids=retrieved,
                    contexts=list(contexts),
                    retrieval=retrieval_scores(retrieved, gt_ids, int(cfg["k"])),
                    judges=verdicts,
                )
            )
        metrics = aggregate(records, JUDGES)
        client = MlflowClient()
        store = Store(client.tracking_uri, "", "", "", client)
        runs.log_metrics(store, run_id, metrics)
        runs.log_items(store, run_id, records)
        return EvaluationResult(metrics=metrics, artifacts={}, run_id=run_id)
