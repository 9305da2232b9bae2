"""``ragtrack eval`` with every LLM step on an OpenAI-compatible endpoint (the loopback server)."""

from __future__ import annotations

import json
import shutil

import pytest

from ragtrack import llm as llm_layer
from ragtrack.api import evaluate
from ragtrack.llm.fake_server import FakeOpenAIServer

from .conftest import make_project

METRICS_ALIKE = ("correctness", "groundedness", "relevance", "organization", "context_recall", "mrr")
KEY = "sk-loopback-secret-7f3a9c2e41b0d8e5"


@pytest.fixture
def endpoint(monkeypatch):
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield server


def test_v5_on_an_openai_endpoint_then_entirely_from_cache(project, endpoint):
    report = evaluate("v5", root=project, llm="openai:fake-model", judge="openai:fake-model")
    assert report.complete and report.metrics["counts/judged/correctness"] == 5 and report.metrics["correctness"] == 4.0
    steps = {r["messages"][0]["content"][:40] for r in endpoint.log.requests}
    assert len(steps) >= 6, "topics, rewrite, outline, answer and the judges all reached the endpoint"
    assert report.params["generator"] == "llm:openai:fake-model@" + endpoint.base_url
    assert report.params["judge"].startswith("openai:fake-model@")
    assert endpoint.log.headers[0]["authorization"] == f"Bearer {KEY}"
    agent = report.accounting["agent"]
    assert agent["answer"]["calls"] == 5 and agent["total"]["tokens_in"] > 0
    calls = len(endpoint.log.requests)

    again = evaluate("v5", root=project, llm="openai:fake-model", judge="openai:fake-model")
    assert len(endpoint.log.requests) == calls, "an unchanged re-run makes zero calls"
    assert again.accounting["judge"]["total"]["calls"] == 0 and again.accounting["judge"]["total"]["cached"] == 20
    assert again.metrics == pytest.approx({**again.metrics, **{k: report.metrics[k] for k in ("correctness", "mrr")}})


def test_a_warm_rerun_of_steps_that_needed_their_repair_round_makes_no_call(project, endpoint):
    """Every first reply is unreadable (an empty answer, a verdict without JSON) and every repair reads:
    a small local model that breaks format. The repaired reply is kept under the original request."""
    from ragtrack.llm.fake_server import default_reply

    def repairing(messages):
        return "could not be read" in messages[-1]["content"]

    def reply(request):
        if repairing(request["messages"]):
            return default_reply(request)
        return "" if '"score"' not in request["messages"][0]["content"] else "I would rate it well."

    endpoint.reply = reply
    report = evaluate("v1", root=project, llm="openai:fake-model", judge="openai:fake-model")
    assert report.complete and report.metrics["counts/judged/correctness"] == 5 and report.metrics["correctness"] == 4.0
    asked = [r["messages"] for r in endpoint.log.requests]
    firsts = [json.dumps(m) for m in asked if not repairing(m)]
    repairs = [json.dumps(m[:-2]) for m in asked if repairing(m)]  # the request it repairs, and its reply
    assert len(firsts) >= 20 and sorted(firsts) == sorted(repairs), "each request was unreadable once, then repaired"
    calls = len(asked)  # 5 items x (the answer + 4 judges) x 2, less identical requests served by the cache

    again = evaluate("v1", root=project, llm="openai:fake-model", judge="openai:fake-model")
    assert len(endpoint.log.requests) == calls, "the warm re-run made no call"
    assert again.accounting["agent"]["answer"]["cached"] == 5 and again.accounting["judge"]["total"]["cached"] == 20
    assert [r.answer for r in again.records] == [r.answer for r in report.records]
    assert again.metrics["correctness"] == report.metrics["correctness"]


def test_a_fresh_checkout_given_only_the_cache_builds_nothing_and_asks_nothing(project, endpoint, tmp_path):
    """CI: each job starts from a new checkout, here at another path, with a new store; only
    ``.ragtrack/cache`` is restored from the last job (docs/ci.md). Nothing in the
    cache may depend on where the project lies."""
    first = evaluate("v5", root=project, llm="openai:fake-model", judge="openai:fake-model")
    assert first.setup == "index built"
    calls = len(endpoint.log.requests)

    checkout = make_project(tmp_path / "another-runner" / "checkout")
    shutil.copytree(project / ".ragtrack" / "cache", checkout / ".ragtrack" / "cache")
    llm_layer._limiters.clear()  # a new process: only the restored cache remembers the endpoint
    again = evaluate("v5", root=checkout, llm="openai:fake-model", judge="openai:fake-model")
    assert again.setup == "index from cache"
    assert len(endpoint.log.requests) == calls, "every topic, rewrite, answer and judge reply came from the cache"
    assert again.run_id != first.run_id and again.tracking_uri != first.tracking_uri
    assert again.metrics == pytest.approx({**again.metrics, **{k: first.metrics[k] for k in METRICS_ALIKE}})


def test_an_llm_agent_under_heuristic_judges_answers_as_many_questions_as_its_limit(project, monkeypatch):
    """The heuristic judges run in one thread; answering must not wait for that thread's pace."""
    with FakeOpenAIServer(latency_s=0.3, capacity=16) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        report = evaluate("v1", root=project, llm="openai:fake-model", use_cache=False)
    assert report.complete and len(server.log.requests) == 5
    assert server.log.peak_in_flight == 4  # the limiter's first contact (2 while answers counted as judge backlog)


def test_the_api_key_never_reaches_the_store_artifacts_or_cache(project, endpoint):
    from ragtrack.llm.fake_server import Fault

    # The endpoint rejects the key and, like OpenAI's API, quotes it in the error message.
    endpoint.inject(*[Fault("401")] * 200)
    report = evaluate("v1", root=project, llm="openai:fake-model", judge="openai:fake-model")
    # A refused key stops the run at the first refusal (five items: eight failures in a row never come).
    assert report.stopped_early and "refused the API key" in report.stopped_early
    assert "***" in report.stopped_early and KEY not in report.stopped_early
    assert KEY in endpoint.log.headers[0]["authorization"]  # the key was really sent...
    files = [p for p in project.rglob("*") if p.is_file()]
    assert any("mlruns" in p.parts for p in files) and any(".ragtrack" in p.parts for p in files), files
    leaked = [p for p in files if KEY[5:25].encode() in p.read_bytes()]
    assert not leaked, leaked  # ...and no part of it was written anywhere


@pytest.mark.parametrize("fault", ["401", "404"])
def test_a_refused_key_or_unknown_model_stops_at_once_with_exit_2_and_no_resume_advice(project, endpoint, fault):
    """A wrong model name took eight failed calls and exit 1 with "run the same command again to resume"
    (a configuration to fix, `ragtrack --help`'s exit 2)."""
    from click.testing import CliRunner

    from ragtrack.cli import main
    from ragtrack.llm.fake_server import Fault

    endpoint.inject(*[Fault(fault)] * 50)
    command = ["--root", str(project), "eval", "--version", "v1", "--judge", "openai:no-such-model"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    said = "refused the API key" if fault == "401" else "answered 404 (no such model, or base_url is not the API's)"
    assert said in result.output and "fix the key, model or base_url" in result.output
    assert "to resume" not in result.output and len(endpoint.log.requests) <= 4  # the first contact, at most


def test_faults_on_a_third_of_requests_lose_no_item_and_do_not_hang(project, endpoint):
    endpoint.fault_rate = 0.3
    report = evaluate("v3", root=project, llm="openai:fake-model", judge="openai:fake-model", use_cache=False)
    assert report.complete and [r.id for r in report.records] == ["a1", "a2", "b1", "c1", "d1"]
    assert endpoint.log.faults_served > 0
    judged = report.metrics["counts/judged/correctness"] + report.metrics["counts/judge_errors/correctness"]
    assert judged + report.metrics["counts/unanswered"] == 5, (
        "every item is scored, a counted judge error or unanswered"
    )
    retries = report.accounting["judge"]["total"]["retries"] + report.accounting["agent"]["total"]["retries"]
    assert retries > 0


def test_an_answer_step_that_fails_leaves_the_item_unanswered_and_unjudged(project, endpoint):
    endpoint.reply = lambda request: ""  # every step gets an empty reply: the answer step cannot be read
    report = evaluate("v1", root=project, llm="openai:fake-model", use_cache=False)
    assert (
        report.complete
        and report.metrics["counts/unanswered"] == 5
        and report.metrics["counts/judged/correctness"] == 0
    )
    assert all(not r.answered and r.judges == {} and "answer: parse: empty answer" in r.errors for r in report.records)
    assert all(r.retrieval for r in report.records), "retrieval happened, and is still measured"


MALFORMED = [
    '```json\n{"score": 4, "reason": "fenced"}\n```',
    'Here is my verdict: {"score": 3, "reason": "prose around"} Thanks!',
    '｛"score"：5，"reason"："全角标点"｝',
    '{"score": "2", "reason": "string score"}',
    '{"score": 9, "reason": "out of range"}',
    '{"score": 4, "reason": "truncated in the mid',
    "I cannot decide.",
]


def test_malformed_judge_replies_never_crash_the_run_and_are_counted(project, endpoint):
    """The endpoint answers every judge call with one of several broken shapes, in turn."""
    import itertools
    import math

    shapes = itertools.cycle(MALFORMED)

    def reply(request):  # a repair request gets nothing better: those items become judge errors
        return "still no verdict" if "could not be read" in request["messages"][-1]["content"] else next(shapes)

    endpoint.reply = reply
    report = evaluate("v1", root=project, judge="openai:fake-model", use_cache=False)
    assert report.complete and len(report.records) == 5
    for judge in ("correctness", "groundedness", "relevance", "organization"):
        n, errors = report.metrics[f"counts/judged/{judge}"], report.metrics[f"counts/judge_errors/{judge}"]
        assert n + errors == 5, judge
        if n:
            assert 1 <= report.metrics[judge] <= 5
    assert not any(isinstance(v, float) and math.isnan(v) for v in report.metrics.values())
    failed = [v for r in report.records for v in r.judges.values() if v.error]
    assert failed and all(v.raw for v in failed), "the raw reply is kept for every judge error"
    scored = [v for r in report.records for v in r.judges.values() if v.score is not None]
    assert len(scored) > len(failed), "most broken shapes are still read"


def test_an_eval_whose_judge_gave_no_verdict_at_all_exits_1(project, monkeypatch):
    """Every reply unreadable: the judge columns read n=0, the run was complete, and the exit status 0."""
    from click.testing import CliRunner

    from ragtrack.cli import main

    with FakeOpenAIServer(reply=lambda r: "I would rather not say.") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        command = ["--root", str(project), "eval", "--version", "v1", "--judge", "openai:m", "--limit", "1"]
        result = CliRunner().invoke(main, command)
    assert result.exit_code == 1 and "no judge verdict at all" in result.output, result.output


def test_an_eval_run_with_llm_is_compared_and_promoted_with_the_same_llm(project, endpoint):
    """promote and compare pin this checkout's spec; an `eval --llm` run is a model version of its own,
    which they called "changed since last evaluated" and could not judge."""
    from ragtrack.api import compare, promote
    from ragtrack.errors import RagtrackError

    plain = evaluate("v1", root=project)
    assert promote("v1", root=project).promoted
    override = evaluate("v1", root=project, llm="openai:fake-model")
    assert override.model_version != plain.model_version
    d = promote("v1", root=project, dry_run=True, llm="openai:fake-model")
    assert (d.run_id, d.model_version) == (override.run_id, override.model_version)
    report = compare("champion", "v1", root=project, llm="openai:fake-model", log=False)
    assert (report.a.run_id, report.b.run_id) == (plain.run_id, override.run_id)
    with pytest.raises(RagtrackError, match=r"run: ragtrack eval --version v1 --llm openai:other"):
        promote("v1", root=project, dry_run=True, llm="openai:other")
