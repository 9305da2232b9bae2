"""The rewrite-fidelity judge: a workflow's rewrite node judged against the question on items without
``must_keep`` terms — its offline heuristic by hand, and the model's verdicts over real HTTP (the
loopback Dify workflow app, a loopback OpenAI-compatible judge) held to the stand-in's record."""

from __future__ import annotations

import json
import re

import pytest

from ragtrack.api import evaluate
from ragtrack.evaluation.nodes import first_failing
from ragtrack.evaluation.rewrite_judge import FidelityInput, heuristic, kept_share
from ragtrack.llm.fake_server import FakeOpenAIServer
from ragtrack.records import ItemRecord, StageRecord
from ragtrack.testing.dify_workflow import REWRITE

from .test_platform_agents import DIFY_AGENT, dify_server, keys, write_spec

__all__ = ["keys"]  # the fixture, shared

COUNTED = "How many steps does the sampler use by default?"
CFG = "What is the default cfg value?"


@pytest.mark.parametrize(
    ("question", "rewrite", "share", "score"),
    [
        # units {default, many, sampler, step}: all kept, then "step" lost (3/4), then "sampler" too (2/4)
        (COUNTED, "how many steps does the sampler use by default", 1.0, 5),
        (COUNTED, "How many does the sampler use by default", 0.75, 3),
        (COUNTED, "How many does the use by default", 0.5, 2),
        # a number lost caps the share at one half, whatever the words
        ("Is 20 steps the default?", "Is steps the default", 0.5, 2),
        ("默认的采样步数是多少？", "默认的采样步数是多少", 1.0, 5),  # Chinese: character bigrams
        (CFG, "", 0.0, 1),
    ],
)
def test_the_offline_fidelity_is_the_share_of_the_question_kept(question, rewrite, share, score):
    assert kept_share(question, rewrite) == pytest.approx(share)
    assert heuristic(FidelityInput(question, rewrite), "en").score == score


def record(fidelity: int | None, must_keep: list[str]) -> ItemRecord:
    node = {"type": "llm", "role": "rewrite", "status": "succeeded"}
    node |= {"fidelity": fidelity} if fidelity is not None else {}
    stage = StageRecord(REWRITE, "llm", 0, 1, {}, {"text": "cfg"}, [], node)
    return ItemRecord("a1", "A", CFG, [], "", "8.0", [], {}, {}, stages=[stage], must_keep=must_keep)


def test_a_rewrite_judged_below_3_is_the_first_failing_node_only_without_must_keep():
    assert first_failing(record(2, [])) == "rewrite"
    assert first_failing(record(3, [])) == ""
    assert first_failing(record(2, ["cfg"])) == ""  # the terms decide: "cfg" was kept
    assert first_failing(record(None, [])) == ""


def fidelity_judge(garbled: str):
    """A judge model: a rewrite keeping every word of the question scores 5, one that lost a word 2; the
    rewrite of ``garbled`` gets a reply with no score, and so does the client's repair round (which asks
    again in the same conversation). The other judges always say 4."""

    def reply(request: dict) -> str:
        said = "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "user")
        found = re.search(r"User question: (.*)\n\nRewritten query: (.*)\n", said)
        if found is None:
            return json.dumps({"score": 4, "reason": "fine"})
        question, rewrite = found.groups()
        if question == garbled:
            return "I would rather not say."
        words = re.findall(r"\w+", question.lower())
        kept = all(w in rewrite.lower().split() for w in words)
        return json.dumps({"score": 5 if kept else 2, "reason": "all kept" if kept else "a word was lost"})

    return reply


def test_the_judge_scores_each_rewrite_and_the_node_metrics_read_it(project, keys, monkeypatch):
    with dify_server(project, app_mode="workflow") as server, FakeOpenAIServer(fidelity_judge(CFG)) as judge:
        monkeypatch.setenv("OPENAI_BASE_URL", judge.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
        server.plant(COUNTED, "drop_term:steps")
        write_spec(project, "dify-flow", DIFY_AGENT.format(url=server.base_url, n=2) + 'app_mode = "workflow"\n')
        report = evaluate("dify-flow", root=project, judge="openai:fake-model")
        asked = [r for r in judge.log.requests if "Rewritten query:" in r["messages"][-1]["content"]]
    runs = {r.question: r for r in server.workflow_runs}
    assert len(asked) == len(runs) == 5  # no golden item of the tiny set has must_keep: each rewrite judged
    expected = {}
    for r in report.records:
        rewrite = next(s for s in r.stages if s.name == REWRITE)
        run = runs[r.question]
        assert rewrite.outputs["text"] == run.query
        if r.question == CFG:  # the reply with no score: an error on the node, no verdict, not in the mean
            assert "fidelity" not in rewrite.node and rewrite.node["fidelity_error"]
            continue
        words = re.findall(r"\w+", r.question.lower())
        expected[r.id] = 5 if all(w in run.query.lower().split() for w in words) else 2
        assert rewrite.node["fidelity"] == expected[r.id], r.id
    counted = next(r for r in report.records if r.question == COUNTED)
    assert expected[counted.id] == 2 and counted.first_failing == "rewrite"
    metrics = report.metrics
    assert metrics["node/rewrite_fidelity"] == pytest.approx(sum((s - 1) / 4 for s in expected.values()) / 4)
    assert metrics["node/counts/rewrite_fidelity"] == 4
    # five verdicts asked, and the client's one repair round of the reply with no score
    assert report.accounting["judge"]["judge.rewrite_fidelity"]["calls"] == 6
