"""ragtrack as an MLflow evaluator plugin, for users who live in MLflow's own API.

Registered under the ``mlflow.model_evaluator`` entry point group, so

    mlflow.models.evaluate(
        "models:/rag-agent@champion", data=df, model_type="question-answering",
        evaluators=["ragtrack"],
        evaluator_config={"ragtrack": {"judge": "offline", "k": 5}},
    )

scores a retrieval-augmented model with ragtrack's ID-based retrieval metrics
and judges, through the same scoring function as ``ragtrack eval``. ``data``
has a question column and, per row, the GT context IDs and GT answer (column
names configurable; ``type`` is optional). The model must return, per
question, a dict with ``answer`` and ``retrieved_ids`` (as ragtrack's own
logged versions do) — or pass precomputed ``predictions``.

Importing this module loads neither FAISS, langchain nor torch.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.models.evaluation import EvaluationResult, ModelEvaluator
from pydantic import ValidationError

from ragtrack.agent import AgentOutput, RetrievedContext
from ragtrack.errors import InputError, problems_from_validation
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.scoring import score_item
from ragtrack.golden import GoldenItem

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


def _output(out: Any) -> AgentOutput:
    """A model's prediction as an agent output. With ``context_ids`` (ragtrack's own models) each
    context keeps the passages it maps to, so the metrics are the eval's exactly; otherwise each
    retrieved ID is a context of its own."""
    if not isinstance(out, dict):
        return AgentOutput(answer=str(out), contexts=[])
    texts = list(out.get("contexts", ()))
    if (per_context := out.get("context_ids")) is not None and len(per_context) == len(texts):
        contexts = [
            RetrievedContext(f"context-{n}", text, tuple(_as_list(ids)), None, "id" if ids else "unmapped")
            for n, (text, ids) in enumerate(zip(texts, per_context, strict=True))
        ]
        return AgentOutput(answer=str(out.get("answer", "")), contexts=contexts)
    ids = _as_list(out.get("retrieved_ids", []))
    contexts = [
        RetrievedContext(pid, texts[n] if n < len(texts) else "", (pid,), None, "id") for n, pid in enumerate(ids)
    ]
    # Contexts beyond the IDs still reach the judges (groundedness reads them).
    contexts += [RetrievedContext(f"context-{n}", t, ()) for n, t in enumerate(texts[len(ids) :], start=len(ids))]
    return AgentOutput(answer=str(out.get("answer", "")), contexts=contexts)


class RagtrackEvaluator(ModelEvaluator):
    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        return model_type in ("question-answering", "retriever", None)

    def evaluate(self, *, model_type, dataset, run_id, evaluator_config, model=None, predictions=None, **kwargs):
        from mlflow import MlflowClient

        from ragtrack.config import ProjectConfig
        from ragtrack.llm import make_llm
        from ragtrack.tracking.runs import log_items
        from ragtrack.tracking.store import Store

        cfg = {**DEFAULTS, **(evaluator_config or {})}
        frame = dataset.features_data.copy()
        if dataset.labels_data is not None and cfg["gt_ids_col"] not in frame:
            frame[cfg["gt_ids_col"]] = list(dataset.labels_data)
        questions = frame[cfg["question_col"]].astype(str).tolist()
        outputs = list(model.predict(questions)) if model is not None else list(dataset.predictions_data)
        panel = JudgePanel.create(make_llm(cfg["judge"], ProjectConfig()), cfg["language"])
        records = []
        for n, (question, out) in enumerate(zip(questions, outputs, strict=True)):
            row = {
                "id": str(n),
                "question": question,
                "type": str(frame[cfg["type_col"]].iloc[n]) if cfg["type_col"] in frame else "A",
                "gt_context_ids": _as_list(frame[cfg["gt_ids_col"]].iloc[n]),
                "gt_answer": str(frame[cfg["gt_answer_col"]].iloc[n]) if cfg["gt_answer_col"] in frame else "-",
            }
            try:
                item = GoldenItem.model_validate(row)
            except ValidationError as e:
                raise InputError(
                    problems_from_validation("evaluation data", e, line=n, noun="column", model=GoldenItem)
                ) from None
            records.append(score_item(item, _output(out), panel, int(cfg["k"])))
        metrics = aggregate(records)
        client = MlflowClient()
        store = Store(client.tracking_uri, "", "", "", client)
        store.log_metrics(run_id, metrics)
        log_items(store, run_id, records)
        return EvaluationResult(metrics=metrics, artifacts={}, run_id=run_id)
