"""Dify workflow apps and chatflows, node by node, over real HTTP on 127.0.0.1 against the loopback
stand-in (rewrite → question classifier → one knowledge base per class → LLM). Every expectation is
computed from the stand-in's own record of what each node did (``server.workflow_runs``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ragtrack.api import evaluate
from ragtrack.cli import main
from ragtrack.testing.dify_workflow import ANSWER, INTENT, REWRITE, UNFAITHFUL

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
