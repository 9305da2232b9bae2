"""Dify workflow apps and chatflows, node by node, over real HTTP on 127.0.0.1 against the loopback
stand-in (rewrite → question classifier → one knowledge base per class → LLM). Every expectation is
computed from the stand-in's own record of what each node did (``server.workflow_runs``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ragtrack.api import compare, evaluate, promote
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.report import node_lines
from ragtrack.testing.dify_workflow import ANSWER, INTENT, REWRITE, UNFAITHFUL
from ragtrack.tracking.store import open_store
from ragtrack.tracking.traces import item_traces

from .test_platform_agents import APP_KEY, DIFY_AGENT, DIFY_SEGMENTS, by_hand, dify_server, keys, write_spec

__all__ = ["keys"]  # the fixture, shared

COUNTED = "How many steps does the sampler use by default?"
CFG = "What is the default cfg value?"


def runs_by_question(server) -> dict:
    return {r.question: r for r in server.workflow_runs}


def expected_units(server, segment_ids: list[str]) -> list[list[str]]:
    names = {s.id: (s.document.name, s.position) for s in server.knowledge.segments}
    return [DIFY_SEGMENTS[names[seg]] for seg in segment_ids]


def test_a_workflow_app_is_scored_from_its_nodes_as_the_app_ran_them(project, keys):
    with dify_server(project, app_mode="workflow") as server:
        server.plant(COUNTED, "drop_term:steps")
        server.plant(CFG, "fail:" + ANSWER)
        write_spec(project, "dify-flow", DIFY_AGENT.format(url=server.base_url, n=2) + 'app_mode = "workflow"\n')
        report = evaluate("dify-flow", root=project)
    runs = runs_by_question(server)
    assert len(report.records) == 5 and len(runs) == 5
    sent = server.replies("workflows_run")[0].request.body
    assert sent["response_mode"] == "streaming" and set(sent["inputs"]) == {"query"}
    for r in report.records:
        run = runs[r.question]
        # One stage per node, in the order they ran, with Dify's node type, status and tokens.
        assert [s.name for s in r.stages] == [n.title for n in run.nodes], r.id
        assert [s.node["type"] for s in r.stages] == [n.node_type for n in run.nodes]
        assert [s.node["status"] for s in r.stages] == [n.status for n in run.nodes]
        assert [s.node["tokens"] for s in r.stages] == [n.tokens for n in run.nodes]
        assert [s.kind for s in r.stages][:5] == ["chain", "llm", "llm", "retriever", "llm"]
        rewrite = next(s for s in r.stages if s.name == REWRITE)
        assert rewrite.outputs["text"] == run.query
        intent = next(s for s in r.stages if s.name == INTENT)
        assert intent.outputs["class_name"] == run.intent
        ((retrieval_title, segments),) = run.retrieved.items()
        retrieval = next(s for s in r.stages if s.name == retrieval_title)
        assert [c.unit_id for c in retrieval.contexts] == segments == [c.unit_id for c in r.contexts]
        units = expected_units(server, segments)
        assert [c.passage_ids for c in r.contexts] == units
        assert r.retrieval == pytest.approx(by_hand(units, r.gt_context_ids))
        if run.failed:
            assert r.errors == [
                f"dify: node {ANSWER!r} (llm) failed: [loopback] Error: node {ANSWER} failed: the model provider "
                "answered 500"
            ]
            assert not r.answered and r.answer == "" and not r.judges and r.stages[-1].node["status"] == "failed"
        else:
            assert r.answer == run.answer and r.answered and not r.errors
    assert "steps" not in runs[COUNTED].query.lower() and runs[COUNTED].query != COUNTED.rstrip("?")
    assert report.metrics["counts/unanswered"] == 1
    usage = report.accounting["agent"]["dify"]
    llm = [n for run in runs.values() for n in run.nodes if n.node_type == "llm" and n.status == "succeeded"]
    assert usage["tokens_in"] == sum(n.outputs["usage"]["prompt_tokens"] for n in llm)
    assert usage["tokens_out"] == sum(n.outputs["usage"]["completion_tokens"] for n in llm)
    p = report.params
    assert p["app_mode"] == "workflow" and p["response_mode"] == "streaming" and p["answer_output"] == "answer"
    # Each item's trace: the item's root span and one span per node, with what Dify said of the node.
    store = open_store(load_config(project))
    failed = next(r for r in report.records if not r.answered)
    [info] = item_traces(store, report.run_id)[failed.id]
    spans = store.client.get_trace(info.trace_id).data.spans
    children = sorted((s for s in spans if s.parent_id is not None), key=lambda s: s.start_time_ns)
    run = runs[failed.question]
    assert [s.name for s in children] == [n.title for n in run.nodes]
    assert [s.attributes["node.type"] for s in children] == [n.node_type for n in run.nodes]
    assert [s.span_type for s in children][:4] == ["CHAIN", "LLM", "LLM", "RETRIEVER"]
    assert children[-1].status.status_code == "ERROR" and children[-1].attributes["node.status"] == "failed"


def test_blocking_and_streaming_give_the_same_records(project, keys):
    """Blocking returns the outputs alone: the contexts come from the End node's variable that holds the
    retrieval node's result (contexts_output); the answers, contexts and retrieval metrics agree."""
    agent = 'app_mode = "workflow"\n'
    with dify_server(project, app_mode="workflow") as server:
        server.plant(COUNTED, "unfaithful")
        write_spec(project, "flow-stream", DIFY_AGENT.format(url=server.base_url, n=2) + agent)
        streamed = evaluate("flow-stream", root=project)
        blocking = agent + 'response_mode = "blocking"\ncontexts_output = "contexts"\n'
        write_spec(project, "flow-block", DIFY_AGENT.format(url=server.base_url, n=2) + blocking)
        blocked = evaluate("flow-block", root=project)
    modes = [x.request.body["response_mode"] for x in server.replies("workflows_run")]
    assert sorted(modes) == ["blocking"] * 5 + ["streaming"] * 5
    by_id = {r.id: r for r in blocked.records}
    for r in streamed.records:
        b = by_id[r.id]
        assert (b.answer, b.retrieval, b.errors) == (r.answer, r.retrieval, r.errors)
        assert [(c.unit_id, c.passage_ids, c.score) for c in b.contexts] == [
            (c.unit_id, c.passage_ids, c.score) for c in r.contexts
        ]
        assert [s.kind for s in b.stages] == ["agent"] and len(r.stages) == 6  # blocking: no nodes
    assert next(r for r in streamed.records if r.question == COUNTED).answer == UNFAITHFUL


def test_a_chatflow_streams_its_nodes_and_a_missing_answer_variable_names_the_outputs(project, keys):
    with dify_server(project, app_mode="advanced-chat") as server:
        server.plant(CFG, "misroute", "empty_retrieval")
        write_spec(project, "chatflow", DIFY_AGENT.format(url=server.base_url, n=2) + 'app_mode = "advanced-chat"\n')
        report = evaluate("chatflow", root=project)
    runs = runs_by_question(server)
    assert all(x.request.body["response_mode"] == "streaming" for x in server.replies("chat_messages"))
    for r in report.records:
        run = runs[r.question]
        assert r.answer == run.answer and [s.name for s in r.stages] == [n.title for n in run.nodes]
        assert [c.unit_id for c in r.contexts] == next(iter(run.retrieved.values()))
    wrong = next(r for r in report.records if r.question == CFG)
    assert runs[CFG].intent == "notes" and wrong.contexts == [] and wrong.retrieval["context_recall"] == 0.0

    with dify_server(project, app_mode="workflow", answer_output="reply") as server:
        agent = DIFY_AGENT.format(url=server.base_url, n=1) + 'app_mode = "workflow"\n'
        write_spec(project, "flow-misnamed", agent)
        report = evaluate("flow-misnamed", root=project, limit=1)
    assert report.records[0].errors == [
        "dify: the workflow's outputs have no text variable 'answer' (its outputs: contexts, reply); set answer_output"
    ]


def test_the_app_mode_must_match_the_app(project, keys):
    with dify_server(project, app_mode="workflow") as server:
        write_spec(project, "dify-chat", DIFY_AGENT.format(url=server.base_url, n=1))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-chat"])
    assert result.exit_code == 2 and "the app is a workflow app" in result.output, result.output
    assert "set app_mode = 'workflow'" in result.output and [x.request.path for x in server.exchanges] == ["/v1/info"]
    assert APP_KEY not in result.output


def add_expectations(project, expectations: dict[str, dict]) -> None:
    """Give the tiny golden set's items node expectations (intent, must_keep)."""
    path = project / "golden" / "golden.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, **expectations.get(r["id"], {})}) + "\n" for r in rows))


EXPECT = {
    "a1": {"intent": "sampler", "must_keep": ["cfg"]},
    "a2": {"intent": "sampler", "must_keep": ["steps", "sampler"]},
    "b1": {"intent": "sampler", "must_keep": ["steps", "cfg"]},
    "c1": {"intent": "models", "must_keep": ["checkpoints"]},
    "d1": {"intent": "models"},
}


def test_node_metrics_and_the_first_failing_node_are_what_the_app_did(project, keys):
    """a2's rewrite loses "steps" (retention 1/2 → rewrite fails first); a1 is routed to notes (wrong
    intent, and its retrieval there misses); b1's answer is made up (generation); the rest pass or fail
    where their record says. Every figure is computed here from the stand-in's record."""
    add_expectations(project, EXPECT)
    with dify_server(project, app_mode="workflow") as server:
        server.plant(COUNTED, "drop_term:steps")
        server.plant(CFG, "misroute")
        server.plant("List the sampler defaults for steps and cfg.", "unfaithful")
        agent = DIFY_AGENT.format(url=server.base_url, n=2) + 'app_mode = "workflow"\n'
        write_spec(project, "dify-flow", agent + '\n[agent.nodes]\nrewrite = "问题改写"\n')
        report = evaluate("dify-flow", root=project)
    records, metrics = report.records, report.metrics
    printed = "\n".join(node_lines(records, metrics))  # what ragtrack eval prints under its tables
    runs = runs_by_question(server)
    golden = {r["id"]: r for r in map(json.loads, (project / "golden" / "golden.jsonl").read_text().splitlines())}
    run_of = {i: runs[g["question"]] for i, g in golden.items()}
    # By hand from the record: intent accuracy over the five items with an intent.
    right = [i for i, e in EXPECT.items() if run_of[i].intent == e["intent"]]
    assert run_of["a1"].intent == "notes" and "a1" not in right
    retained = [
        sum(t.casefold() in run_of[i].query.casefold() for t in e["must_keep"]) / len(e["must_keep"])
        for i, e in EXPECT.items()
        if "must_keep" in e
    ]
    assert retained[1] == 0.5
    assert metrics["node/intent_accuracy"] == pytest.approx(len(right) / 5)
    assert metrics["node/rewrite_retention"] == pytest.approx(sum(retained) / len(retained))
    by_node: dict[str, list[float]] = {}
    for i, g in golden.items():
        ((title, segments),) = run_of[i].retrieved.items()
        units = expected_units(server, segments)
        covered = {pid for unit in units for pid in unit}
        by_node.setdefault(title, []).append(len(covered & set(g["gt_context_ids"])) / len(g["gt_context_ids"]))
    for title, recalls in by_node.items():
        key = f"node/retrieval/{title.replace('·', '_')}/context_recall"
        assert metrics[key] == pytest.approx(sum(recalls) / len(recalls)), key
    roles = {s.name: s.node["role"] for r in records for s in r.stages if s.node.get("role")}
    assert roles["问题改写"] == "rewrite" and roles["意图识别"] == "intent" and roles["回答生成"] == "generation"
    assert {s.node["role_from"] for r in records for s in r.stages if s.name == "问题改写"} == {"declared"}
    first = {r.id: r.first_failing for r in records}
    assert first["a2"] == "rewrite" and first["a1"] == "intent"
    # b1's made-up answer: generation fails when a judge scored it below 3, as its record says.
    b1 = next(r for r in records if r.id == "b1")
    low = any(b1.judges[j].score < 3 for j in ("groundedness", "correctness") if j in b1.judges)
    assert first["b1"] == ("generation" if low else "")
    # What the CLI prints: the same figures, and the failures by node.
    assert f"intent accuracy {len(right) / 5:.3f} (n=5)" in printed
    failures = "failures by node (first failing node per item, in flow order): rewrite 1/5, intent 1/5"
    assert printed.count(failures) == 1, printed
    assert "rewrite: 问题改写 — declared" in printed and "intent: 意图识别 — question-classifier node" in printed
    assert "  a2: rewrite" in printed and "  a1: intent" in printed
    assert metrics["node/first_failing/rewrite"] == 1 and metrics["node/first_failing/intent"] == 1
    # The run's description and its stored item records say the same.
    store = open_store(load_config(project))
    note = store.description(report.run_id)
    assert "**Failures by node**" in note and "| rewrite |" in note and "| intent |" in note, note
    assert f"intent accuracy {len(right) / 5:.3f}" in note
    stored = {r.id: r.first_failing for r in store.records(report.run_id)}
    assert stored == first


def test_a_declared_node_the_app_lacks_is_one_error_listing_its_nodes(project, keys):
    with dify_server(project, app_mode="workflow") as server:
        agent = DIFY_AGENT.format(url=server.base_url, n=1) + 'app_mode = "workflow"\n'
        write_spec(project, "dify-flow", agent + '\n[agent.nodes]\nintent = "意图分类"\n')
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-flow"])
    assert result.exit_code == 2, result.output
    assert (
        "[agent.nodes] intent = '意图分类': the app has no node titled so; its nodes: 开始, 问题改写, 意图识别, "
        in result.output
    ), result.output


def test_compare_pairs_node_metrics_and_promote_honours_a_node_guard(project, keys):
    """Two versions of the workflow app: the second's classifier misroutes two questions. compare pairs
    intent accuracy item by item; promote, with intent_accuracy as a node guard, refuses the regression."""
    add_expectations(project, EXPECT)
    (project / "ragtrack.toml").write_text('[promotion]\nguards = ["intent_accuracy"]\n')
    agent = DIFY_AGENT.format(url="{url}", n=2) + 'app_mode = "workflow"\n'
    with dify_server(project, app_mode="workflow") as good, dify_server(project, app_mode="workflow") as bad:
        bad.plant(CFG, "misroute")
        bad.plant(COUNTED, "misroute")
        write_spec(project, "flow-a", agent.replace("{url}", good.base_url))
        write_spec(project, "flow-b", agent.replace("{url}", bad.base_url))
        evaluate("flow-a", root=project)
        evaluate("flow-b", root=project)
    report = compare("flow-a", "flow-b", root=project, log=False)
    row = next(r for r in report.rows if r.metric == "node/intent_accuracy" and r.scope == "all")
    good_runs, bad_runs = runs_by_question(good), runs_by_question(bad)
    golden = [json.loads(line) for line in (project / "golden" / "golden.jsonl").read_text().splitlines()]
    a = [float(good_runs[g["question"]].intent == g["intent"]) for g in golden]
    b = [float(bad_runs[g["question"]].intent == g["intent"]) for g in golden]
    assert (row.diff.n, row.diff.mean_a, row.diff.mean_b) == (5, sum(a) / 5, sum(b) / 5)
    assert row.diff.delta == pytest.approx((sum(b) - sum(a)) / 5) and row.diff.delta < 0 and not row.primary

    promote("flow-a", root=project)
    decision = promote("flow-b", root=project)
    assert not decision.promoted
    assert any(r.startswith("guard node/intent_accuracy regressed: ") for r in decision.reasons), decision.reasons
    assert "node/intent_accuracy >= champion - 0" in decision.rule
