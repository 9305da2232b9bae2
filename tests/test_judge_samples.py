"""``--judge-samples K``: each LLM judge asked K times per item over real HTTP (the loopback server),
every verdict kept, the mean scored, each sample cached, and the two-level interval in compare."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ragtrack.api import evaluate
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import compare_records
from ragtrack.llm.fake_server import FakeOpenAIServer

# The loopback judge answers by the seed it is sent: 4 without one (the temperature-0 sample), then 3, 5.
BY_SEED = {None: 4, 1: 3, 2: 5}


def judge_by_seed(request: dict) -> str:
    return json.dumps({"score": BY_SEED[request.get("seed")], "reason": f"seed {request.get('seed')}"})


@pytest.fixture
def endpoint(monkeypatch):
    with FakeOpenAIServer(reply=judge_by_seed) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
        yield server


def test_each_judge_is_asked_k_times_and_every_verdict_is_recorded(project, endpoint):
    report = evaluate("v1", root=project, judge="openai:fake-model", judge_samples=3)
    assert report.complete and len(report.records) == 5
    judged = [r for r in endpoint.log.requests if '"score"' in r["messages"][0]["content"]]
    assert len(judged) == 5 * 4 * 3  # items × judges × samples
    asked = Counter((r["temperature"], r.get("seed")) for r in judged)
    assert asked == {(0.0, None): 20, (0.7, 1): 20, (0.7, 2): 20}  # sample 0 as a single verdict, then seeded
    verdict = report.records[0].judges["correctness"]
    assert verdict.samples == [4, 3, 5] and verdict.score == 4.0 and verdict.normalized == 0.75
    assert verdict.reason == "seed None"  # the temperature-0 sample's reason
    assert report.metrics["correctness"] == 4.0 and report.metrics[m.judge_spread("correctness")] == 1.0
    assert report.params["judge_samples"] == "3" and "|samples=3@t=0.7" in report.params["judge_identity"]

    calls = len(endpoint.log.requests)
    again = evaluate("v1", root=project, judge="openai:fake-model", judge_samples=3)
    assert len(endpoint.log.requests) == calls, "every sample is cached under its own key"
    assert again.records[0].judges["correctness"].samples == [4, 3, 5]

    rows, _ = compare_records(report.records, again.records)
    row = next(r for r in rows if r.metric == "correctness" and r.scope == m.ALL)
    assert row.diff.judge_samples == 3 and row.diff.within_sd == pytest.approx((2 / 3) ** 0.5)  # √(1/3 + 1/3)


def test_a_single_sample_run_reads_the_same_cache_and_old_records_read_as_one_verdict(project, endpoint):
    single = evaluate("v1", root=project, judge="openai:fake-model")
    calls = len(endpoint.log.requests)
    assert single.records[0].judges["correctness"].samples == []  # one verdict: no sample list
    assert "samples=" not in single.params["judge_identity"]
    evaluate("v1", root=project, judge="openai:fake-model", judge_samples=3)
    new = [r for r in endpoint.log.requests[calls:] if '"score"' in r["messages"][0]["content"]]
    assert {r.get("seed") for r in new} == {1, 2}, "sample 0 is the single-verdict request, read from the cache"
    assert m.item_samples(single.records[0], "correctness") == [4.0]
    assert m.item_samples(single.records[0], "correctness_norm") == [0.75]


def test_heuristic_judges_are_deterministic_and_asked_once(project):
    report = evaluate("v1", root=project, judge_samples=3)
    assert report.params["judge_samples"] == "1" and report.params["judge_identity"].startswith("heuristic@")
    assert all(not v.samples for r in report.records for v in r.judges.values())
