"""Engines: the Spark engine (real Spark local[2], the registered pyfunc through ``mlflow.pyfunc.spark_udf``)
gives the local engine's item records, means and run structure in MLflow, on the shipped set, on an imported
benchmark and for an external agent; an endpoint judge never has more requests in flight than its limit."""

from __future__ import annotations

import shutil
import time

import mlflow
import pytest
from click.testing import CliRunner

from ragtrack.agent import AgentOutput, RetrievedContext, Stage
from ragtrack.api import evaluate
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.engines.spark import endpoint_share, master_addresses, task_items
from ragtrack.evaluation import metrics as m
from ragtrack.llm.accounting import Usage
from ragtrack.llm.fake_server import FakeOpenAIServer
from ragtrack.registry import UnknownNameError
from ragtrack.tracking.store import Tag, open_store

from .conftest import DATA, REPO, crash_after, free_port, make_project, shared_cache


def timeless(record) -> dict:
    """An item record without what measures time (how long it took, when each stage ran)."""
    data = record.to_json()
    data.pop("latency_s")
    for stage in data["stages"]:
        stage.pop("start_ns"), stage.pop("end_ns")
    for steps in data["usage"].values():
        for usage in steps.values():
            usage.pop("latencies")
    return data


def structure(root, run_id: str) -> dict:
    """What the MLflow UI and ragtrack's commands read of a run, values that depend on time left out."""
    store = open_store(load_config(root))
    run = store.client.get_run(run_id)
    traces = mlflow.search_traces(run_id=run_id, return_type="list")
    return {
        "params": run.data.params,
        "metrics": sorted(run.data.metrics),
        "tags": sorted(run.data.tags),
        "artifacts": sorted(f.path for f in store.client.list_artifacts(run_id)),
        "traces": {
            t.info.tags[Tag.ITEM_ID]: (
                [(s.name, s.span_type) for s in t.data.spans],
                sorted((a.name, str(a.value)) for a in t.info.assessments),
            )
            for t in traces
        },
    }


def assert_same_eval(root, local, spark) -> None:
    assert spark.complete and spark.run_id != local.run_id
    assert [timeless(r) for r in spark.records] == [timeless(r) for r in local.records]
    untimed = {k: v for k, v in local.metrics.items() if "latency" not in k}  # an agent call's seconds
    assert {k: spark.metrics[k] for k in untimed} == untimed  # every mean, per type, count, call, exactly
    assert sorted(spark.metrics) == sorted(local.metrics)
    a, b = structure(root, local.run_id), structure(root, spark.run_id)
    assert len(b["traces"]) == len(spark.records)  # one trace per item, spans and assessments alike
    assert a == b
    tags = open_store(load_config(root)).client.get_run(spark.run_id).data.tags
    assert tags[Tag.ENGINE] == "spark:local[2]" and tags[Tag.COMPLETE] == "true"


def test_spark_gives_the_local_engines_records_means_and_run_on_the_shipped_set(shipped, spark):
    root, local = shipped
    assert_same_eval(root, local, evaluate("v1", root=root, engine="spark", master="local[2]"))


def test_an_external_agent_answers_through_its_pyfunc_on_spark_as_it_does_here(shipped, spark):
    """The python kind (the shipped example): built from the registered model on the executors. Its replies
    are cached: the second eval asks again (``use_cache=False`` reaches the executors) to count as the first."""
    root, _ = shipped
    version = str(root / "pipelines" / "examples" / "python-rag.toml")
    local = evaluate(version, root=root)
    spark_run = evaluate(version, root=root, engine="spark", master="local[2]", use_cache=False)
    assert_same_eval(root, local, spark_run)
    assert spark_run.accounting["agent"]["python"]["calls"] == 48
    assert {c.mapping.split()[0] for r in local.records for c in r.contexts} == {"text"}  # mapped by text


def test_spark_gives_the_local_engines_records_on_an_imported_benchmark(tmp_path, spark):
    """HotpotQA-100 (normalized, CC BY-SA 4.0) imported; v1 on 12 of its multi-hop questions (the index that
    test_normalized_import builds, from the tests' shared cache of the corpus)."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    command = ["golden", "import", str(DATA / "hotpotqa100"), "--out", str(root / "hotpotqa"), "--limit", "12"]
    assert CliRunner().invoke(main, command).exit_code == 0
    (root / "ragtrack.toml").write_text(
        '[project]\ncorpus = "hotpotqa/corpus.jsonl"\ngolden = "hotpotqa/golden.jsonl"\n'
        '[spark]\nmaster = "local[2]"\n'  # the config's master, as a project would set it
    )
    with shared_cache(root, DATA / "hotpotqa100"):
        local = evaluate("v1", root=root)
        assert local.metrics["all_hops_at_k"] >= 0 and local.metrics[m.key(m.ITEMS, "D")] > 0
        assert_same_eval(root, local, evaluate("v1", root=root, engine="spark"))


def test_a_judge_endpoints_limit_is_shared_by_the_tasks_never_exceeded(shipped, tmp_path, spark, monkeypatch):
    """16 items in two tasks at once; the judge endpoint allows 3 requests in flight: each task may have
    3 // 2 = 1, so the server sees at most two at once (one task alone, unshared, would send three)."""
    root = tmp_path / "project"
    for folder in ("pipelines", "golden"):
        shutil.copytree(REPO / folder, root / folder)
    cache = shipped[0] / ".ragtrack" / "cache"  # the shipped project's index (content-keyed), not built again
    (root / "ragtrack.toml").write_text(f'[project]\ncache_dir = "{cache}"\n[eval]\nmax_concurrency = 3\n')
    with FakeOpenAIServer(latency_s=0.2, capacity=16) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-key-for-the-spark-judges")
        report = evaluate("v1", root=root, judge="openai:judge", limit=16, engine="spark", master="local[2]")
    assert (
        report.complete and report.metrics[m.judge_count("correctness")] == 16 and report.metrics["correctness"] == 4.0
    )
    assert len(server.log.requests) == 16 * 4
    assert 1 <= server.log.peak_in_flight <= 2
    assert report.metrics[m.PEAK_IN_FLIGHT] <= 3  # the engine's bound: its busiest workers' peaks added


def test_the_share_of_an_endpoint_by_hand():
    assert endpoint_share(slots=2, limit=None) == (2, None)  # offline: every slot, nothing to share
    assert endpoint_share(slots=2, limit=16) == (2, 8)
    assert endpoint_share(slots=8, limit=3) == (3, 1)  # fewer tasks than slots: one request each
    assert endpoint_share(slots=4, limit=10) == (4, 2)  # 4 × 2 = 8 ≤ 10: the remainder is left unused
    assert [task_items(n, 2) for n in (5, 48, 1000, 3219)] == [8, 8, 125, 128]


def test_an_eval_interrupted_here_is_finished_on_spark_in_the_same_run(project, spark):
    """Engines share the checkpoint: the records are the same whichever engine made them."""
    from ragtrack.api import Progress

    with pytest.raises(KeyboardInterrupt):
        evaluate("v1", root=project, progress=Progress(on_item=crash_after(2)))
    resumed = evaluate("v1", root=project, engine="spark", master="local[2]")
    assert resumed.complete and resumed.resumed == 2 and len(resumed.records) == 5
    assert [r.id for r in resumed.records] == ["a1", "a2", "b1", "c1", "d1"]
    assert len(mlflow.search_traces(run_id=resumed.run_id, return_type="list")) == 5


def test_unknown_engines_and_a_master_without_spark_are_refused(project):
    with pytest.raises(UnknownNameError, match="unknown engine 'dask'; expected one of: local, spark"):
        evaluate("v1", root=project, engine="dask")
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "v1", "--engine", "dask"])
    assert result.exit_code == 2 and "'dask' is not one of 'local', 'spark'" in result.output
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "v1", "--master", "local[2]"])
    assert result.exit_code == 2 and "--master local[2] names a Spark cluster: it goes with --engine spark" in (
        result.output
    )
    assert not (project / "mlruns").exists()  # refused before any work


def test_an_agent_output_survives_its_json_form():
    ctx = RetrievedContext("c1", "text", ("p1", "p2"), 0.25, "span")
    stage = Stage("retrieve", "retriever", 1, 2, {"query": "q"}, {"n": 1}, (ctx,))
    usage = Usage(calls=1, tokens_in=3, cost_usd=0.5, latencies=[0.1])
    out = AgentOutput("a", [ctx], ["q2"], ["o"], ["e"], {"answer": usage}, False, [stage], False, True)
    assert AgentOutput.from_json(out.to_json()) == out


def monitored(root, tiny_corpus, *args: str) -> tuple[dict, dict]:
    """Two days of traffic pulled into ``root`` and monitored (every message sampled): each window run's
    metrics, and each message's verdicts on its trace (name → (score, rationale))."""
    from ragtrack.tracking.production import ProductionLog

    from .test_production_loop import _day, _monitor_runs, _pull

    _pull(root, _day("2025-03-01", 4, tiny_corpus, 0) + _day("2025-03-02", 10, tiny_corpus, 4), "export")
    result = CliRunner().invoke(main, ["--root", str(root), "monitor", "--sample-rate", "1", *args])
    assert result.exit_code == 1, result.output  # the second day's dislikes alarm, whichever engine judged
    runs = {key: run.data.metrics for key, run in _monitor_runs(root).items()}
    log = ProductionLog(open_store(load_config(root)))
    verdicts = {
        info.tags[Tag.PRODUCTION_MESSAGE]: sorted(
            (a.name, a.value, a.rationale) for a in info.assessments or () if a.name.startswith("judge/")
        )
        for info in log.trace_infos()
    }
    return runs, verdicts


def test_monitor_on_spark_writes_the_local_engines_verdicts_and_runs(tmp_path, tiny_corpus, spark):
    local = monitored(make_project(tmp_path / "local"), tiny_corpus)
    on_spark = monitored(make_project(tmp_path / "spark"), tiny_corpus, "--engine", "spark", "--master", "local[2]")
    assert on_spark == local
    runs, verdicts = on_spark
    assert len(runs) == 2 and sum(len(v) for v in verdicts.values()) == 2 * (22 + 24)


def test_monitor_on_spark_shares_the_judge_endpoints_limit(project, tiny_corpus, spark, monkeypatch):
    """48 messages in tasks of 8, two at once; the endpoint allows 3 requests in flight: one each."""
    (project / "ragtrack.toml").write_text("[eval]\nmax_concurrency = 3\n")
    with FakeOpenAIServer(latency_s=0.1, capacity=16) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-key-for-the-spark-judges")
        runs, verdicts = monitored(
            project, tiny_corpus, "--judge", "openai:judge", "--engine", "spark", "--master", "local[2]"
        )
    assert sum(len(v) for v in verdicts.values()) == 2 * (22 + 24)
    assert 0 < len(server.log.requests) <= 2 * (22 + 24)  # messages alike are asked once, then cached
    assert 1 <= server.log.peak_in_flight <= 2
    assert all(metrics["judged_relevance"] == 24 for metrics in runs.values())


@pytest.mark.parametrize(
    ("master", "addresses"),
    [
        ("spark://head:7077", [("head", 7077)]),
        ("spark://h1:7077,h2:7078", [("h1", 7077), ("h2", 7078)]),
        ("spark://[::1]:7077", [("::1", 7077)]),
        ("local[*]", []),
        ("yarn", []),
        ("k8s://https://api:6443", []),
    ],
)
def test_a_standalone_masters_addresses_are_read_from_its_url(master, addresses):
    assert master_addresses(master) == addresses


def test_an_unreachable_spark_master_is_one_error_line_in_bounded_time(project):
    """Nothing listens on the port (it was bound, then closed): refused at once, no Java started."""
    port = free_port()
    started = time.monotonic()
    result = CliRunner().invoke(
        main, ["--root", str(project), "monitor", "--engine", "spark", "--master", f"spark://127.0.0.1:{port}"]
    )
    assert time.monotonic() - started < 10
    assert result.exit_code == 2
    assert result.output == (
        f"error: Spark master spark://127.0.0.1:{port} cannot be reached (127.0.0.1:{port}: Connection refused): "
        "is the cluster up? (--master, or [spark] master of ragtrack.toml)\n"
    )
