"""A Dify workflow app node by node in production: the runs the loopback stand-in performed for
``ragtrack eval`` are traced as Dify's MLflow provider traces them (one ``workflow`` trace per run,
a span per node), pulled with ``logs pull --from mlflow``, and scored by ``monitor`` and ``logs
triage`` in a real MLflow store. The figures must be the eval's, and every expectation is computed
from the stand-in's own record (``server.workflow_runs``), never from what the commands returned."""

from __future__ import annotations

from collections import Counter

import mlflow
import pytest
from mlflow.entities import SpanType

from ragtrack.api import evaluate, monitor, pull_logs, triage_logs
from ragtrack.config import load_config
from ragtrack.evaluation.nodes import metric_name
from ragtrack.production.monitor import Window, compare_all
from ragtrack.report import monitor_lines, triage_lines
from ragtrack.testing.dify_traces import TracedRun, run_id_of, write_workflow_runs
from ragtrack.testing.dify_workflow import ANSWER, INTENT, REWRITE
from ragtrack.tracking.production import read_messages
from ragtrack.tracking.store import open_store

from .test_platform_agents import DIFY_AGENT, dify_server, keys, write_spec
from .test_workflow_nodes import EXPECT, add_expectations

__all__ = ["keys"]  # the fixture, shared

DAY1, DAY2, DAY3 = "2026-03-02", "2026-03-03", "2026-03-04"
COUNTED = "How many steps does the sampler use by default?"
CFG = "What is the default cfg value?"
DEFAULTS = "List the sampler defaults for steps and cfg."
ENCODER = "Which file should a low-memory machine load for the large encoder?"


def traces_experiment(project, name: str) -> str:
    return open_store(load_config(project)).client.create_experiment(name)


def tv(a: Counter, b: Counter) -> float:
    """Total variation distance, written out: half the summed absolute share differences."""
    classes = set(a) | set(b)
    return sum(abs(a[c] / sum(a.values()) - b[c] / sum(b.values())) for c in classes) / 2


def test_the_eval_figures_come_out_of_the_apps_traces_by_pull_monitor_and_triage(project, keys):
    """Day 1 holds the very runs the eval scored (misrouted, found nothing, made up, failed at the
    answer node); day 2 asks the same questions again with no fault but every question about steps
    misrouted; day 3 is day 1 again. Reviewers disliked the day-1 runs that went wrong, and liked the
    others."""
    add_expectations(project, EXPECT)
    with dify_server(project, app_mode="workflow") as server:
        server.plant(CFG, "misroute")
        server.plant(COUNTED, "empty_retrieval")
        server.plant(DEFAULTS, "unfaithful")
        server.plant(ENCODER, "fail:" + ANSWER)
        agent = DIFY_AGENT.format(url=server.base_url, n=1) + 'app_mode = "workflow"\n'
        write_spec(project, "dify-flow", agent + '\n[agent.nodes]\nrewrite = "问题改写"\n')
        report = evaluate("dify-flow", root=project)
        eval_runs = list(server.workflow_runs)
        day2_runs = [server.workflow.run(r.question, ("misroute",) if "steps" in r.question else ()) for r in eval_runs]
        assert len(eval_runs) == 5
        wrong = {r.question for r in eval_runs if r.failed or "misroute" in r.faults or not any(r.retrieved.values())}
        wrong |= {r.question for r in eval_runs if "unfaithful" in r.faults}
        traced = [
            TracedRun(r, f"{DAY1}T0{n}:00:00Z", f"user-{n}", "dislike" if r.question in wrong else "like")
            for n, r in enumerate(eval_runs, start=1)
        ]
        traced += [TracedRun(r, f"{DAY2}T0{n}:00:00Z", f"user-{n}") for n, r in enumerate(day2_runs, start=1)]
        traced += [TracedRun(r, f"{DAY3}T0{n}:00:00Z", f"user-{n}") for n, r in enumerate(eval_runs, start=1)]
        experiment = traces_experiment(project, "dify-workflow-traces")
        ids = write_workflow_runs(traced, server.workflow, "loopback app", experiment)  # the app's name (/info)
        assert ids == [run_id_of(t) for t in traced]
        # With the version's spec: its [agent.nodes] name the rewrite, as in the eval.
        pulled = pull_logs("mlflow", experiment="dify-workflow-traces", version="dify-flow", app="flow", root=project)
    records, metrics = report.records, report.metrics
    assert (pulled.new, dict(pulled.unresolved)) == (15, {})
    assert (pulled.disliked, pulled.liked) == (len(wrong), 5 - len(wrong))
    stored = {m.message_id: m for m in read_messages(open_store(load_config(project)), source="mlflow")}
    by_question = {r.question: r for r in records}
    for t, run_id in zip(traced, ids, strict=True):
        m, run = stored[run_id], t.run
        # One stage per node the app ran, as the eval's record of the same run has them.
        assert [s.name for s in m.stages] == [n.title for n in run.nodes]
        assert [s.node["status"] for s in m.stages] == [n.status for n in run.nodes]
        assert [s.node["tokens"] for s in m.stages] == [n.tokens for n in run.nodes]
        roles = {s.name: s.node.get("role") for s in m.stages}
        assert (roles[REWRITE], roles[INTENT], roles[ANSWER]) == ("rewrite", "intent", "generation")
        ((title, segments),) = run.retrieved.items()
        assert roles[title] == "retrieval"
        assert [c.unit_id for c in next(s for s in m.stages if s.name == title).contexts] == segments
        assert next(s for s in m.stages if s.name == INTENT).outputs["class_name"] == run.intent
        if not t.created_at.startswith(DAY2):
            r = by_question[run.question]
            assert [(s.name, s.kind, s.node.get("role"), s.node.get("role_from")) for s in m.stages] == [
                (s.name, s.kind, s.node.get("role"), s.node.get("role_from")) for s in r.stages
            ]
            assert next(s for s in m.stages if s.name == REWRITE).node["role_from"] == "declared"
            assert [c.passage_ids for c in m.contexts] == [c.passage_ids for c in r.contexts]

    result = monitor(root=project, sample_rate=1.0)
    windows = {r.window.day: r for r in result.results}
    assert sorted(windows) == [DAY1, DAY2, DAY3]
    day1, day2, day3 = (windows[d].window.metrics() | windows[d].comparison.metrics() for d in (DAY1, DAY2, DAY3))
    # The eval's own node figures, on the same runs.
    for key, value in metrics.items():
        if key.startswith("node/retrieval/") and key.endswith("/empty_rate"):
            assert day1[key] == pytest.approx(value), key
    assert day1["node/generation_groundedness"] == pytest.approx(metrics["node/generation_groundedness"])
    # Intents by hand from the stand-in's record, and how far day 2 moved from day 1.
    intents = [Counter(r.intent for r in runs) for runs in (eval_runs, day2_runs)]
    for day, counts in zip((day1, day2), intents, strict=True):
        assert day["node/intent/runs"] == sum(counts.values())
        for c, n in counts.items():
            assert day[f"node/intent/{metric_name(c)}"] == pytest.approx(n / sum(counts.values()))
    assert intents[0] != intents[1]
    assert day2["node/intent_shift"] == day2["node/intent_shift_first"] == pytest.approx(tv(intents[1], intents[0]))
    assert (
        day3["node/intent_shift"] == pytest.approx(tv(intents[0], intents[1])) and day3["node/intent_shift_first"] == 0
    )
    assert "node/intent_shift" not in day1 and "node/intent_shift_first" not in day1
    assert {k: v for k, v in day3.items() if k.startswith("node/") and "shift" not in k} == pytest.approx(
        {k: v for k, v in day1.items() if k.startswith("node/")}
    )
    empty = Counter(t for r in day2_runs for t, s in r.retrieved.items() if not s)
    ran = Counter(t for r in day2_runs for t in r.retrieved)
    for title, n in ran.items():
        assert day2[f"node/retrieval/{metric_name(title)}/empty_rate"] == pytest.approx(empty[title] / n)

    # Triage: which node the disliked runs failed at first, as the eval's first failing node says
    # wherever production can see it (no golden intent or must-keep terms there).
    expected: Counter[str] = Counter()
    for run in eval_runs:
        if run.question not in wrong:
            continue
        r = by_question[run.question]
        failed = next((n for n in run.nodes if n.status == "failed"), None)
        grounded = r.judges.get("groundedness")
        if failed is not None:
            expected[f"{failed.title} ({r.first_failing})"] += 1
        elif not any(run.retrieved.values()):
            expected[f"{next(iter(run.retrieved))} (retrieval)"] += 1
        elif grounded is not None and grounded.score < 3:
            expected[f"{ANSWER} (generation)"] += 1
    assert expected[f"{ANSWER} (generation)"] >= 1  # the failed answer node, at least
    found = triage_logs(root=project, sample_rate=0.0)
    assert found.triage.failing_nodes == dict(expected.most_common())
    assert found.triage.disliked_runs == len(wrong)
    # What the commands print.
    named = ", ".join(f"{node} {n}" for node, n in sorted(expected.items(), key=lambda kv: (-kv[1], kv[0])))
    unseen = len(wrong) - sum(expected.values())
    tail = f"; {unseen} of {len(wrong)} with no failing node seen" if unseen else ""
    assert f"disliked workflow runs by first failing node: {named}{tail}" in triage_lines(found)
    shares = ", ".join(f"{c} {n}/5" for c, n in sorted(intents[0].items()))
    shift = f"shift {tv(intents[0], intents[1]):.3f} from {DAY2}, 0.000 from the first day, {DAY1}"
    assert f"flow {DAY3} intents: {shares} ({shift})" in monitor_lines(result)


def test_a_node_span_that_cannot_be_read_is_a_counted_named_skip_and_the_run_is_kept(project):
    """A workflow trace whose classifier span has no ``node_type`` and whose retrieval span's outputs
    are a bare string: both spans are left out, counted by reason; the readable nodes are the stages,
    with a key the rewrite's prompt quoted kept out of the store."""
    experiment = traces_experiment(project, "broken")
    root = mlflow.start_span_no_context(
        "workflow",
        span_type=SpanType.CHAIN,
        inputs={"query": CFG},
        attributes={"workflow_run_id": "run-1", "app_name": "flow"},
        experiment_id=experiment,
        start_time_ns=1_772_400_000 * 10**9,
    )
    spans = [
        (REWRITE, SpanType.LLM, {"node_type": "llm"}, "default cfg value"),
        (INTENT, SpanType.LLM, {}, {"class_name": "sampler"}),
        ("知识检索·sampler", SpanType.RETRIEVER, {"node_type": "knowledge-retrieval"}, "oops"),
        (ANSWER, SpanType.LLM, {"node_type": "llm"}, "The cfg value defaults to 8.0."),
    ]
    prompt = [
        {"role": "system", "content": "Rewrite it. (api key sk-loopbackSECRET12345)"},
        {"role": "user", "content": CFG},
    ]
    for n, (title, kind, attributes, outputs) in enumerate(spans):
        start = root.start_time_ns + n * 10**7
        span = mlflow.start_span_no_context(
            title,
            span_type=kind,
            parent_span=root,
            inputs=prompt if n == 0 else {"query": "default cfg value"},
            attributes={"node_id": f"exec-{n}", "status": "succeeded", **attributes},
            start_time_ns=start,
        )
        span.end(outputs=outputs, end_time_ns=start + 10**7)
    root.end(outputs={"answer": "The cfg value defaults to 8.0."}, end_time_ns=root.start_time_ns + 10**8)
    mlflow.flush_trace_async_logging()
    pulled = pull_logs("mlflow", experiment="broken", app="flow", root=project)
    assert pulled.new == 1
    assert dict(pulled.unresolved) == {
        "workflow node spans skipped, node_type: not an identifier (a string or an integer)": 1,
        "workflow node spans skipped, outputs: neither documents nor a result list": 1,
    }
    (m,) = read_messages(open_store(load_config(project)), source="mlflow")
    assert [(s.name, s.node["index"], s.node.get("role")) for s in m.stages] == [
        (REWRITE, 1, None),  # its text feeds no retrieval node that could be read
        (ANSWER, 2, "generation"),
    ]
    assert m.answer == "The cfg value defaults to 8.0." and m.contexts == []
    assert m.stages[0].inputs == {"prompt": [{**prompt[0], "content": "Rewrite it. (api key ***)"}, prompt[1]]}


def test_an_intent_shift_beyond_its_threshold_alarms_over_enough_classified_runs():
    before = Window("flow", DAY1, messages=20, intents=Counter(sampler=10, models=10))
    after = Window("flow", DAY2, messages=20, intents=Counter(sampler=4, models=10, notes=6))
    # shares 0.5/0.5/0 → 0.2/0.5/0.3: |−0.3| + 0 + 0.3 = 0.6, half of it 0.3
    (_, compared) = compare_all([before, after], {"intent_shift": 0.25}, min_messages=20)
    (drop,) = compared.drops
    assert (drop.metric, drop.previous, drop.current, drop.previous_day) == (
        "intent_shift",
        0.0,
        pytest.approx(0.3),
        DAY1,
    )
    assert str(drop) == f"flow {DAY2}: intent_shift 0.000 -> 0.300 (+0.300; alarm beyond 0.25) against {DAY1}"
    assert compare_all([before, after], {"intent_shift": 0.3}, min_messages=20)[1].drops == ()  # not beyond
    assert compare_all([before, after], {"intent_shift": 0.25}, min_messages=21)[1].drops == ()  # too few runs
    assert compare_all([before, after], {}, min_messages=20)[1].intent_shift == pytest.approx(0.3)  # no threshold
