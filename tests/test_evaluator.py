"""``mlflow.models.evaluate(..., evaluators=["ragtrack"])`` through the entry-point plugin."""

import mlflow
import pandas as pd
import pytest

from ragtrack.api import evaluate
from ragtrack.config import load_config
from ragtrack.evaluation.metrics import ALIASES
from ragtrack.tracking.store import open_store

GT = "guides/sampler.md#sampler-guide/guidance/cfg-value"


def test_plugin_is_registered_under_the_mlflow_entry_point():
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    _model_evaluation_registry.register_entrypoints()
    assert "ragtrack" in _model_evaluation_registry._registry


def test_static_predictions_are_scored_by_ids_and_judges(project):
    open_store(load_config(project))
    data = pd.DataFrame(
        {
            "question": ["What is the default cfg value?", "How many steps by default?"],
            "gt_context_ids": [[GT], ["guides/sampler.md#sampler-guide/steps"]],
            "gt_answer": ["The cfg value defaults to 8.0.", "20 steps."],
            "outputs": [
                {
                    "answer": "The cfg value defaults to 8.0.",
                    "retrieved_ids": ["x", GT],
                    "contexts": ["The cfg value defaults to 8.0."],
                },
                {"answer": "No idea.", "retrieved_ids": ["y"], "contexts": ["unrelated"]},
            ],
        }
    )
    with mlflow.start_run() as run:
        result = mlflow.models.evaluate(
            data=data,
            predictions="outputs",
            model_type="question-answering",
            evaluators=["ragtrack"],
            evaluator_config={"ragtrack": {"k": 2}},
        )
    m = result.metrics
    assert m["context_recall"] == 0.5 and m["mrr"] == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert m["counts/judged/correctness"] == 2 and m["correctness/type_A"] == m["correctness"]
    logged = mlflow.get_run(run.info.run_id).data.metrics
    assert logged["context_recall"] == 0.5


def test_a_registered_version_evaluates_through_mlflow_as_its_eval_did(project):
    """The model says which passages each context maps to, so every retrieval figure of an item is
    the eval's own, unmapped share and ranks by returned unit included."""
    report = evaluate("v1", root=project)
    open_store(load_config(project))
    for record in report.records:
        data = pd.DataFrame(
            {"question": [record.question], "gt_context_ids": [record.gt_context_ids], "gt_answer": [record.gt_answer]}
        )
        with mlflow.start_run():
            result = mlflow.models.evaluate(
                f"models:/rag-agent/{report.model_version}",
                data=data,
                model_type="question-answering",
                evaluators=["ragtrack"],
            )
        for name, value in record.retrieval.items():
            if value is not None:
                assert result.metrics[ALIASES.get(name, name)] == pytest.approx(value), (record.id, name)
        unmapped = sum(not c.passage_ids for c in record.contexts) / len(record.contexts)
        assert result.metrics["mapping/unmapped_share"] == pytest.approx(unmapped)
        assert result.metrics["counts/judged/correctness"] == 1  # and the judges ran on its answer
