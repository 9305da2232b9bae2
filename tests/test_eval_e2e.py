"""``evaluate`` end to end against a real MLflow store (SQLite in a temp project), real FAISS."""

import json
import os
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from ragtrack.api import Progress, evaluate, run_markdown
from ragtrack.config import load_config
from ragtrack.tracking.store import open_store

from .conftest import git_checkout


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    from .conftest import make_project

    root = make_project(tmp_path_factory.mktemp("e2e") / "project")
    here = os.getcwd()
    os.chdir(root)  # as `ragtrack eval` run in the project: the default root ".", relative paths
    try:
        return root, evaluate("v1")
    finally:
        os.chdir(here)


def test_run_has_params_metrics_per_type_and_items(first_run):
    root, report = first_run
    store = open_store(load_config(root))
    assert store.tracking_uri == f"sqlite:///{root.resolve() / 'mlruns' / 'mlflow.db'}"
    run = store.client.get_run(report.run_id)
    p, m = run.data.params, run.data.metrics
    assert p["version"] == "v1" and p["judge"] == "heuristic" and p["judge_identity"].startswith("heuristic@")
    assert p["generator"].startswith("extractive") and p["golden_digest"] == report.params["golden_digest"]
    assert p["spec.chunking.chunk_size"] == "500" and p["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    for name in (
        "context_recall",
        "context_precision",
        "mrr",
        "hit_rate",
        "ndcg_at_k",
        "correctness",
        "norm/correctness",
    ):
        assert 0 <= m[name] <= (5 if name == "correctness" else 1), name
    assert m["counts/judged/correctness"] == 5 and m["counts/judge_errors/correctness"] == 0
    assert m["counts/items/type_A"] == 2 and "context_recall/type_D" in m
    assert run.info.status == "FINISHED" and run.data.tags["ragtrack.complete"] == "true"

    local = mlflow.artifacts.download_artifacts(
        run_id=report.run_id, artifact_path="items.jsonl", tracking_uri=store.tracking_uri
    )
    items = [json.loads(line) for line in Path(local).read_text().splitlines()]
    assert [i["id"] for i in items] == ["a1", "a2", "b1", "c1", "d1"]
    first = items[0]
    assert first["retrieved_unit_ids"] and first["retrieved_passage_ids"] and first["judges"]["correctness"]["reason"]
    # The per-item table is an MLflow table (the artifact viewer shows it as one): split orientation + tag.
    table = store.client.load_table(store.experiment_id, "items_table.json", run_ids=[report.run_id])
    assert list(table["id"]) == ["a1", "a2", "b1", "c1", "d1"]
    assert table["question"][0] == "What is the default cfg value?"
    assert list(table["correctness"]) == [r.judges["correctness"].score for r in report.records]
    assert table["correctness_reason"][0] == report.records[0].judges["correctness"].reason
    logged = json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert {"path": "items_table.json", "type": "table"} in logged


def test_version_is_a_registered_model_reused_when_unchanged(first_run):
    root, report = first_run
    store = open_store(load_config(root))
    mv = store.client.get_model_version("rag-agent", report.model_version)
    assert mv.tags["ragtrack.version"] == "v1" and mv.tags["ragtrack.spec_hash"] == report.params["spec_hash"]
    logged = mlflow.get_logged_model(
        report.run_id and store.client.get_run(report.run_id).data.tags["ragtrack.model_id"]
    )
    assert logged.params["chunking.strategy"] == "fixed" and "prompt.answer.hash" in logged.params
    assert any(metric.key == "context_recall" for metric in logged.metrics)  # eval metrics linked to the model

    # The registered model is a working pyfunc (logged as code, not pickled), wherever it is loaded.
    assert Path.cwd() != root
    agent = mlflow.pyfunc.load_model(f"models:/rag-agent/{report.model_version}")
    [out] = agent.predict(["What is the default cfg value?"])
    assert "guides/sampler.md#sampler-guide/guidance/cfg-value" in out["retrieved_ids"] and out["answer"]
    assert agent.metadata.signature.inputs.to_dict() == [{"type": "string", "required": True}]  # from the hint
    [from_frame] = agent.predict(pd.DataFrame({"question": ["What is the default cfg value?"]}))
    assert from_frame["retrieved_ids"] == out["retrieved_ids"]  # a one-column DataFrame works too

    again = evaluate("v1", root=root)
    assert again.model_version == report.model_version  # unchanged spec → same registry version
    assert again.setup == "index from cache" and again.run_id != report.run_id


def test_crash_keeps_finished_items_and_resume_completes_the_same_run(project):
    class Crash(Exception):
        pass

    seen = []

    def crash_after_two(record):
        seen.append(record.id)
        if len(seen) == 2:
            raise Crash()

    with pytest.raises(Crash):
        evaluate("v1", root=project, progress=Progress(on_item=crash_after_two))
    store = open_store(load_config(project))
    killed = store.client.search_runs([store.experiment_id])[0]
    assert killed.info.status == "FAILED"  # an error, not an interruption (Ctrl-C and SIGTERM end it KILLED)

    report = evaluate("v1", root=project)
    assert report.resumed == 2 and len(report.records) == 5 and report.complete
    assert report.run_id == killed.info.run_id  # the interrupted run is completed, not duplicated
    assert store.client.get_run(report.run_id).info.status == "FINISHED"
    found = mlflow.search_traces(run_id=report.run_id, return_type="list")
    assert sorted(t.info.tags["ragtrack.item_id"] for t in found) == ["a1", "a2", "b1", "c1", "d1"]  # one each


@pytest.mark.parametrize("limit", [0, -3, "5", 2.0, True])
def test_limit_is_a_whole_number_of_items_as_on_the_command_line(project, limit):
    from pydantic import ValidationError

    from ragtrack.errors import RagtrackError

    # Not an int at all: the type check on entry names it; an int below 1: the limit's own check.
    wrong_type = not isinstance(limit, int) or isinstance(limit, bool)
    with pytest.raises(ValidationError if wrong_type else RagtrackError, match="limit"):
        evaluate("v1", root=project, limit=limit)
    assert not (project / "mlruns").exists(), "refused before any run was started"


def test_a_limit_that_leaves_out_question_types_is_among_the_reports_cautions(project):
    """``cautions()`` holds what the figures depend on, as ``ragtrack eval`` prints it after its table."""
    report = evaluate("v1", root=project, limit=2)
    assert report.cautions()[0].startswith("--limit 2 takes the first 2 items in file order: no item of type")
    # The run's page (and so `--markdown`) says it too: it was only on stderr and in cautions().
    assert "**Cautions**" in run_markdown(report.run_id, root=project)
    assert f"* {report.cautions()[0]}" in run_markdown(report.run_id, root=project)
    full = evaluate("v1", root=project)
    assert not any("--limit" in c for c in full.cautions()) and "--limit" not in run_markdown(full.run_id, root=project)
    store = open_store(load_config(project))
    assert store.run_summary(report.run_id).limited == "2 of 5" and store.run_summary(full.run_id).limited == ""


def test_reports_print_short_and_their_types_import_from_the_api(first_run):
    from ragtrack import api

    root, report = first_run
    text = repr(report)
    assert text.startswith("EvalReport(version='v1', run_id=") and "records" not in text and len(text) < 600
    assert all(hasattr(api, name) for name in ("Decision", "MetricRow", "RunSummary", "ComparisonReport"))


def test_an_eval_run_names_the_commit_it_measured(tmp_path):
    """A CI run could not be traced to the commit it measured (no mlflow.source.git.* tags)."""
    import shutil

    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    from ragtrack.tracking.source import source_tags

    assert source_tags(tmp_path) == {}  # not a checkout
    head = git_checkout(tmp_path, "main", {"spec.toml": "x = 1\n"})
    assert source_tags(tmp_path) == {
        "mlflow.source.git.commit": head,
        "mlflow.source.git.branch": "main",
        "ragtrack.git_dirty": "false",
    }
    (tmp_path / "spec.toml").write_text("x = 2\n")  # measured with an uncommitted edit: said so
    assert source_tags(tmp_path)["ragtrack.git_dirty"] == "true"
