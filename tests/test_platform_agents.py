"""External agents over real HTTP on 127.0.0.1: Dify and RAGFlow apps (loopback servers speaking their
APIs), any JSON endpoint, a Python callable and a LangChain runnable — evaluated like built-in versions.

The servers re-chunk the project's knowledge base their own way; the expected passages of every
segment below are worked out by hand from tests/data/kb (see the comments), and every item's
retrieval metrics are checked against a hand computation from the segments the server returned.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.agents.endpoint import Endpoint, EndpointError
from ragtrack.api import Progress, evaluate
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.errors import InputError, RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import RetryPolicy
from ragtrack.spec import load_spec
from ragtrack.testing.coze_server import CozeServer
from ragtrack.testing.dify_server import DifyServer
from ragtrack.testing.knowledge import Knowledge, dify_chunks, extractive_answer
from ragtrack.testing.ragflow_server import RagflowServer
from ragtrack.testing.server import Fault, LoopbackServer, Request, Response, bearer

from .conftest import crash_after, page_server

APP_KEY = "app-loopback-7d3f9a1c2e5b4c88"
DATASET_KEY = "dataset-loopback-1a2b3c4d5e6f"
RAGFLOW_KEY = "ragflow-loopback-9e8d7c6b5a41"

MODELS, CHECKPOINTS, ENCODERS = (
    "guides/models.md#model-files",
    "guides/models.md#model-files/checkpoints",
    "guides/models.md#model-files/text-encoders",
)
GUIDE, STEPS = "guides/sampler.md#sampler-guide", "guides/sampler.md#sampler-guide/steps"
CFG = "guides/sampler.md#sampler-guide/guidance/cfg-value"
NEGATIVE = "guides/sampler.md#sampler-guide/guidance/negative-prompt"

# Dify's way at 200 characters: paragraphs packed while they fit.
#   models.md 1: "# Model files" + intro + "## Checkpoints" + its body (192 chars) → both sections
#   models.md 2: "## Text encoders" + its body
#   sampler.md 1: title, intro, "## Steps" + body, "## Guidance" (a heading between passages) → 2 passages
#   sampler.md 2: "### Cfg value" + body, "### Negative prompt" + body → 2 passages
DIFY_SEGMENTS = {
    ("guides/models.md", 1): [MODELS, CHECKPOINTS],
    ("guides/models.md", 2): [ENCODERS],
    ("guides/sampler.md", 1): [GUIDE, STEPS],
    ("guides/sampler.md", 2): [CFG, NEGATIVE],
    ("notes.txt", 1): ["notes.txt"],
}
# RAGFlow's way at 300 characters: lines without heading marks.
#   models.md: all six lines fit (284 chars) → the three sections
#   sampler.md 1: everything up to the "Negative prompt" heading line (284 chars); that heading is
#     15 of the 87 characters of its section, too little to count → 3 passages
#   sampler.md 2: the negative prompt sentence
RAGFLOW_SEGMENTS = {
    ("guides/models.md", 1): [MODELS, CHECKPOINTS, ENCODERS],
    ("guides/sampler.md", 1): [GUIDE, STEPS, CFG],
    ("guides/sampler.md", 2): [NEGATIVE],
    ("notes.txt", 1): ["notes.txt"],
}


def write_spec(project: Path, name: str, agent: str, declared: str = "") -> None:
    text = f'[version]\nname = "{name}"\ndescription = "test"\n\n[agent]\n{agent}\n'
    (project / "pipelines" / f"{name}.toml").write_text(text + (f"\n[declared]\n{declared}\n" if declared else ""))


def by_hand(units: list[list[str]], gt: list[str], k: int | None = None) -> dict[str, float]:
    """The retrieval metrics of one item, written out. Recall and precision count the passages the
    units cover (each once); the rank metrics rank the units: a unit is a hit when it brings a GT
    passage no earlier unit brought; nDCG is cut at the version's top_k (``k``), or at the number of
    units returned, and its ideal has one unit per hit plus one per GT passage never brought."""
    ranked: list[str] = []
    for ids in units:
        ranked += [p for p in ids if p not in ranked]
    found = [p for p in ranked if p in gt]
    seen: set[str] = set()
    hits = []
    for ids in units:
        new = set(ids) & set(gt) - seen
        hits.append(bool(new))
        seen |= new
    first = next((n for n, hit in enumerate(hits, start=1) if hit), None)
    k = k or len(units)
    dcg = sum(1 / math.log2(n + 1) for n, hit in enumerate(hits[:k], start=1) if hit)
    best = min(sum(hits) + len(set(gt) - seen), k)
    ideal = sum(1 / math.log2(n + 1) for n in range(1, best + 1))
    return {
        "context_recall": len(found) / len(gt),
        "context_precision": len(found) / len(ranked) if ranked else 0.0,
        "reciprocal_rank": 1 / first if first else 0.0,
        "hit_rate": 1.0 if found else 0.0,
        "ndcg_at_k": dcg / ideal,
        "precision_at_k": sum(hits[:k]) / k,  # precision@k: relevant units in the first k, over k
        "all_hops_at_k": None,  # these items have no GT groups
    }


def check_against_server(report, server: LoopbackServer, handler: str, segments_of, expected: dict, k=None) -> None:
    """Every item's contexts are the segments the server returned, mapped as worked out by hand,
    and its retrieval metrics equal the hand computation from them."""
    replies = {question_of(x.request.body): x for x in server.replies(handler)}
    names = {s.id: (s.document.name, s.position) for s in server.knowledge.segments}
    for record in report.records:
        returned = segments_of(replies[record.question].response.body)
        assert [c.unit_id for c in record.contexts] == returned, record.id
        units = [expected[names[seg]] for seg in returned]
        assert [c.passage_ids for c in record.contexts] == units, record.id
        assert all(c.mapping == "text 1.00" for c in record.contexts)
        assert record.retrieval == pytest.approx(by_hand(units, record.gt_context_ids, k)), record.id


def question_of(body: dict) -> str:
    """The question in a request of any of the platforms here."""
    for key in ("query", "question", "q"):
        if body.get(key):
            return body[key]
    return body["messages"][-1]["content"]


def dify_segments(body) -> list[str]:
    return [r["segment_id"] for r in sorted(body["metadata"]["retriever_resources"], key=lambda r: r["position"])]


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("DIFY_APP_KEY", APP_KEY)
    monkeypatch.setenv("DIFY_DATASET_KEY", DATASET_KEY)
    monkeypatch.setenv("RAGFLOW_KEY", RAGFLOW_KEY)


def dify_server(project: Path, **kw) -> DifyServer:
    return DifyServer(project / "golden" / "kb", app_key=APP_KEY, dataset_key=DATASET_KEY, max_chars=200, **kw)


DIFY_AGENT = 'kind = "dify"\nbase_url = "{url}"\napi_key_env = "DIFY_APP_KEY"\nmax_concurrency = {n}\n'


# ---------------------------------------------------------------------------------------- Dify
def test_a_dify_chat_app_is_evaluated_with_contexts_mapped_by_text(project, keys):
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=4), 'prompt = "Answer briefly."')
        report = evaluate("dify-app", root=project)
    assert report.complete and len(report.records) == 5 and not any(r.errors for r in report.records)
    check_against_server(report, server, "chat_messages", dify_segments, DIFY_SEGMENTS)
    assert report.metrics["mapping/unmapped_share"] == 0.0 and report.metrics["counts/retrieval_reported"] == 5
    p = report.params
    assert p["agent_kind"] == p["platform"] == "dify" and p["base_url"] == server.base_url
    assert p["app_mode"] == "chat" and p["spec.declared.prompt"] == "Answer briefly." and len(p["prompt_hash"]) == 12
    assert p["app_name"] == "loopback app" and p["app_mode_reported"] == "chat"  # from GET /info
    assert p["id_table"].startswith("none")
    usage = report.accounting["agent"]["dify"]
    assert usage["calls"] == 5 and usage["tokens_in"] > 0 and usage["cost_usd"] > 0  # prices came as strings
    sent = server.replies("chat_messages")[0].request.body
    assert sent["response_mode"] == "blocking" and sent["user"] == "ragtrack" and sent["inputs"] == {}


def test_a_completion_app_and_an_agent_chat_app_that_only_streams(project, keys):
    with dify_server(project, app_mode="completion") as server:
        # No query_input: Dify's completion template reads the question from the input "query" (the
        # loopback, like Dify, ignores a top-level query there: the question never reached the prompt).
        agent = DIFY_AGENT.format(url=server.base_url, n=2) + 'app_mode = "completion"\n'
        write_spec(project, "dify-completion", agent)
        report = evaluate("dify-completion", root=project)
    assert report.complete and report.metrics["counts/retrieval_reported"] == 5
    assert {x.request.path for x in server.exchanges} == {"/v1/info", "/v1/completion-messages"}
    sent = server.replies("completion_messages")[0].request.body
    assert sent["inputs"]["query"] == sent["query"]
    check_against_server(report, server, "completion_messages", dify_segments, DIFY_SEGMENTS)

    with dify_server(project, app_mode="completion") as server:  # the spec left at app_mode = "chat"
        write_spec(project, "dify-mismatch", DIFY_AGENT.format(url=server.base_url, n=1))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-mismatch"])
        assert result.exit_code == 2 and "the app is a completion app" in result.output, result.output
        assert "set app_mode = 'completion'" in result.output and len(server.exchanges) == 1  # /info only
        write_spec(project, "dify-no-v1", DIFY_AGENT.format(url=server.base_url.removesuffix("/v1"), n=1))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-no-v1"])
        assert result.exit_code == 2 and "its API lives under /v1" in result.output, result.output

    with dify_server(project, app_mode="agent-chat") as server:
        write_spec(project, "dify-agent", DIFY_AGENT.format(url=server.base_url, n=1))  # app_mode left at "chat"
        report = evaluate("dify-agent", root=project)
    # The first blocking request is refused (agent-chat apps only stream); every other one streams.
    modes = [x.request.body["response_mode"] for x in server.exchanges if x.request.handler == "chat_messages"]
    assert modes == ["blocking"] + ["streaming"] * 5
    assert report.complete and not any(r.errors for r in report.records)
    assert all(r.answer and r.contexts for r in report.records)
    assert report.accounting["agent"]["dify"]["tokens_in"] > 0


def dify_retrieval(server: DifyServer, key_env: str, extra: str = "") -> str:
    """The [agent] table of a retrieval_only Dify version."""
    return (
        f'kind = "dify"\nbase_url = "{server.base_url}"\napi_key_env = "{key_env}"\n'
        f'retrieval_only = true\ndataset_id = "{server.dataset_id}"\n{extra}'
    )


def test_dify_retrieval_only_measures_the_knowledge_base_alone(project, keys):
    with dify_server(project) as server:
        agent = dify_retrieval(server, "DIFY_DATASET_KEY", 'top_k = 2\nsearch_method = "hybrid_search"\n')
        write_spec(project, "dify-retrieval", agent)
        report = evaluate("dify-retrieval", root=project)
    sent = server.replies("retrieve")[0].request.body["retrieval_model"]
    assert sent == {
        "search_method": "hybrid_search",
        "reranking_enable": False,
        "top_k": 2,
        "score_threshold_enabled": False,
    }
    assert all(len(r.contexts) == 2 and r.answer == "" for r in report.records)
    # No answer to judge: no verdicts (they were 1 on every judge, "empty answer"), nothing unanswered.
    assert all(r.judges == {} and r.answered for r in report.records)
    assert "correctness" not in report.metrics and report.metrics["counts/unanswered"] == 0

    def segments(body):
        return [r["segment"]["id"] for r in body["records"]]

    check_against_server(report, server, "retrieve", segments, DIFY_SEGMENTS, k=2)


def test_dify_retrieval_only_with_an_app_key_stops_before_the_first_question(project, keys):
    """It asked every question, logged a run and registered a version, with eight 401s."""
    with dify_server(project) as server:
        write_spec(project, "dify-retrieval", dify_retrieval(server, "DIFY_APP_KEY"))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-retrieval"])
    assert result.exit_code == 2 and "retrieval_only needs a knowledge-base API key" in result.output
    assert [x.request.path for x in server.exchanges] == [f"/v1/datasets/{server.dataset_id}/documents"]
    # A mistyped dataset_id asked every question (8 × 404 "Dataset not found."), logged and registered.
    with dify_server(project) as server:
        agent = dify_retrieval(server, "DIFY_DATASET_KEY").replace(server.dataset_id, "0" * 8 + server.dataset_id[8:])
        write_spec(project, "dify-retrieval", agent)
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-retrieval"])
    assert result.exit_code == 2 and "dataset_id: no knowledge base 00000000-" in result.output, result.output
    assert len(server.exchanges) == 1 and not logged_runs(project)


def logged_runs(project: Path) -> list:
    """The project's runs (in any experiment) and registered model versions: a check that stops an eval
    before its first question leaves neither."""
    from mlflow import MlflowClient

    db = project / "mlruns" / "mlflow.db"
    if not db.exists():
        return []
    client = MlflowClient(f"sqlite:///{db}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [*client.search_runs(experiments), *client.search_model_versions()]


def test_a_workflow_app_a_dead_base_url_and_a_null_answer_are_said_before_or_per_question(project, keys, monkeypatch):
    """A workflow app asked as a chat app got every question refused (400 not_chat_app) and an empty run
    logged; a base URL with nothing listening, 6 retries per question; an answer of null was judged as
    an empty answer."""
    with dify_server(project, app_mode="workflow") as server:
        write_spec(project, "dify-flow", DIFY_AGENT.format(url=server.base_url, n=1))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-flow"])
    assert result.exit_code == 2 and "the app is a workflow app" in result.output, result.output
    assert "set app_mode = 'workflow'" in result.output
    assert [x.request.path for x in server.exchanges] == ["/v1/info"]

    import socket

    with socket.socket() as s:  # a port nothing listens on (really refused connections, retried as ever)
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    import ragtrack.agents.endpoint as endpoint

    # Only the backoff's sleeps are skipped (six attempts span 15-31 s); the connections are real.
    monkeypatch.setattr(endpoint, "RetryPolicy", lambda: RetryPolicy(sleep=lambda seconds: None))
    write_spec(project, "dify-dead", DIFY_AGENT.format(url=dead, n=1))
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-dead"])
    assert result.exit_code == 2 and "ConnectError" in result.output, result.output
    assert "(is it running, and is base_url right?)" in result.output
    assert not logged_runs(project)

    class NullAnswer(DifyServer):
        def chat_messages(self, request):
            reply = super().chat_messages(request)
            reply.body["answer"] = None
            return reply

    with NullAnswer(project / "golden" / "kb", app_key=APP_KEY, max_chars=200) as server:
        write_spec(project, "dify-null", DIFY_AGENT.format(url=server.base_url, n=1))
        report = evaluate("dify-null", root=project, limit=2)
    assert all(r.errors == ["dify: the reply has no answer text (answer: None)"] for r in report.records)
    assert all(not r.answered and not r.judges for r in report.records)


def test_a_reply_without_retrieval_metadata_is_an_item_error_never_a_recall_of_0(project, keys):
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=1))
        server.inject(Fault("no_metadata"), Fault("no_citations"))  # the first two items
        report = evaluate("dify-app", root=project, use_cache=False)
    bad, good = report.records[:2], report.records[2:]
    assert all(r.retrieval == {} and r.contexts == [] and r.answer for r in bad)
    assert "retriever_resources" in bad[0].errors[0] and "Citations and Attributions" in bad[1].errors[0]
    assert report.metrics["counts/retrieval_reported"] == 3 and report.metrics["counts/agent_errors"] == 2
    expected = sum(r.retrieval["context_recall"] for r in good) / 3  # the mean covers the three that said
    assert report.metrics["context_recall"] == pytest.approx(expected)
    # Judges that read the contexts are not asked about an answer whose contexts are unknown
    # (groundedness was 1 there, "every statement unsupported", and promote read it as a regression).
    assert all(sorted(r.judges) == ["correctness", "relevance"] for r in bad)
    assert all(sorted(r.judges) == ["correctness", "groundedness", "organization", "relevance"] for r in good)
    assert report.metrics["counts/judged/groundedness"] == 3 and report.metrics["counts/judged/correctness"] == 5

    with dify_server(project, citations=False) as server:  # an app with citations switched off
        write_spec(project, "dify-nocite", DIFY_AGENT.format(url=server.base_url, n=2))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-nocite"])
    assert result.exit_code == 0, result.output
    assert "5 of 5 replies did not say what was retrieved" in result.output
    assert "(n=0/5)" in result.output  # the retrieval rows cover no item, and say so


def test_429_timeouts_and_dropped_connections_are_retried(project, keys):
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=1))
        server.inject(Fault("429", 0.05), Fault("500"), Fault("drop"), Fault("rate_limit_403"))
        report = evaluate("dify-app", root=project, use_cache=False)
    assert report.complete and not any(r.errors for r in report.records)
    assert report.accounting["agent"]["dify"]["retries"] == 4 and report.accounting["agent"]["dify"]["calls"] == 5


def test_a_web_page_answering_200_is_not_retried_and_names_the_url():
    """An HTTP agent's URL pointing at a web UI: each question was asked six times (1.5 minutes for 8)."""
    slept: list[float] = []
    with page_server(b"<!doctype html><html><title>Search</title></html>") as (url, hits):
        endpoint = Endpoint(url, headers={}, timeout_s=5, max_concurrency=1, retry=RetryPolicy(sleep=slept.append))
        with pytest.raises(EndpointError, match=r"HTTP 200 reply is not JSON \(is the URL the API's\?\)"):
            endpoint.request("POST", "/ask", json_body={"q": "x"}, usage=Usage(), step="test")
    assert len(hits) == 1 and not slept, "not retried"


def test_the_loopback_servers_take_faults_on_their_command_line(project):
    """Faults could be injected only in-process: a user rehearsing an outage had to write a wrapper."""
    from ragtrack.testing import dify_server, ragflow_server

    kb = str(project / "golden" / "kb")
    with dify_server.from_args(["--kb", kb, "--port", "0", "--fault", "429:3", "--fault", "no_citations"]) as d:
        assert list(d.faults) == [Fault("429", 3.0), Fault("no_citations")]
        key = {"Authorization": "Bearer app-loopback"}  # the default app key
        app = Endpoint(d.base_url, headers=key, timeout_s=5, max_concurrency=1, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(EndpointError, match="429"):
            body = {"inputs": {}, "query": "cfg value", "user": "u", "response_mode": "blocking"}
            app.request("POST", "/chat-messages", json_body=body, usage=Usage(), step="test")
    with ragflow_server.from_args(["--kb", kb, "--port", "0", "--fault", "llm_error"]) as r:
        assert list(r.faults) == [Fault("llm_error")]
    with pytest.raises(SystemExit):  # argparse's own error, naming the kinds
        ragflow_server.from_args(["--kb", kb, "--fault", "no_citations"])


def test_the_endpoint_honours_retry_after_and_backs_off_on_overload(project):
    slept: list[float] = []
    with dify_server(project) as server:
        endpoint = Endpoint(
            server.base_url,
            headers={"Authorization": f"Bearer {DATASET_KEY}"},
            timeout_s=0.5,
            max_concurrency=4,
            retry=RetryPolicy(max_attempts=4, sleep=slept.append),
        )
        server.inject(Fault("429", 7), Fault("slow", 1.0))
        usage = Usage()
        path = f"/datasets/{server.dataset_id}/retrieve"
        reply = endpoint.request("POST", path, json_body={"query": "cfg value"}, usage=usage, step="test")
        assert reply["records"][0]["segment"]["content"].startswith("### Cfg value")
        assert usage.retries == 2 and usage.calls == 1 and slept[0] >= 7  # Retry-After wins over the backoff

        server.inject(*[Fault("500")] * 4)
        with pytest.raises(EndpointError, match="gave up after 4 attempts"):
            endpoint.request("POST", path, json_body={"query": "cfg value"}, usage=usage, step="test")
        wrong = Endpoint(server.base_url, headers={"Authorization": "Bearer app-x"}, timeout_s=5, max_concurrency=1)
        with pytest.raises(EndpointError, match="401 unauthorized: Access token is invalid") as e:
            wrong.request("GET", "/datasets", usage=Usage(), step="test")
        assert e.value.status == 401


def test_an_agent_endpoint_resumes_the_concurrency_its_last_run_reached(project, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from ragtrack.llm.memory import EndpointMemory

    memory_file = tmp_path / "endpoints.json"
    with dify_server(project) as server:
        url = server.base_url
        path = f"/datasets/{server.dataset_id}/retrieve"

        def run(endpoint: Endpoint, n: int) -> None:
            def ask(_):
                endpoint.request("POST", path, json_body={"query": "cfg value"}, usage=Usage(), step="test")

            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(ask, range(n)))

        auth = {"Authorization": f"Bearer {DATASET_KEY}"}
        first = Endpoint(url, headers=auth, timeout_s=5, max_concurrency=8, memory=EndpointMemory(memory_file))
        assert first.limiter.limit == 2  # a new endpoint starts low
        run(first, 30)
        saved = memory_file.read_text()
        assert DATASET_KEY not in saved
        learned = EndpointMemory(memory_file).concurrency(f"agent@{server.base_url}")
        # Whatever it reached (replies within milliseconds jitter a lot: it may well have halved).
        assert learned == (int(first.limiter.limit), not first.limiter.slow_start), saved
        again = Endpoint(url, headers=auth, timeout_s=5, max_concurrency=8, memory=EndpointMemory(memory_file))
        assert (again.limiter.limit, not again.limiter.slow_start) == learned


def test_min_concurrency_is_a_floor_under_an_agent_endpoint_and_unset_changes_no_hash(project, keys):
    with dify_server(project) as server:
        spec = DIFY_AGENT.format(url=server.base_url, n=4)
        write_spec(project, "dify-app", spec + "min_concurrency = 4\n")
        server.inject(*[Fault("slow", 0.3)] * 6)  # the app check and five answers, each 0.3 s
        report = evaluate("dify-app", root=project, use_cache=False)
        # Without the floor the limit starts at 2 and stays there for five items. Until the runner
        # counted only answered items against the judges' backlog, offline judges (one worker) also
        # held any agent to two questions at once.
        assert report.complete and server.peak_in_flight == 4
        assert report.params["spec.agent.min_concurrency"] == "4"
    # Unset, the key is not part of the spec: this spec's hash is the one it had before the key existed.
    write_spec(project, "dify-app", DIFY_AGENT.format(url="http://127.0.0.1:9/v1", n=4))
    spec = load_spec("dify-app", project / "pipelines")
    assert "agent.min_concurrency" not in spec.params() and spec.hash == "125ff079a3d0dbc7"


def test_replies_are_cached_by_agent_and_question_and_no_cache_asks_again(project, keys):
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=2))
        first = evaluate("dify-app", root=project)
        asked = len(server.replies("chat_messages"))
        again = evaluate("dify-app", root=project)
        assert len(server.replies("chat_messages")) == asked == 5, "an unchanged re-run asks nothing"
        assert again.accounting["agent"]["dify"]["cached"] == 5
        assert [r.retrieval for r in again.records] == [r.retrieval for r in first.records]
        evaluate("dify-app", root=project, use_cache=False)
        assert len(server.replies("chat_messages")) == 10


def test_another_app_key_behind_the_same_spec_asks_again_and_does_not_resume(project, keys, monkeypatch):
    """On one Dify the key is the app: "current" and "next" apps share base_url and spec. The next
    app's eval answered every question from the current app's cache (0 calls), and would resume its run."""

    warnings: list[str] = []

    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=1))
        evaluate("dify-app", root=project)
        assert len(server.replies("chat_messages")) == 5
        server.app_key = "app-loopback-next-app-5e6f"  # the duplicated app, with its own key
        monkeypatch.setenv("DIFY_APP_KEY", server.app_key)
        report = evaluate("dify-app", root=project)
        assert len(server.replies("chat_messages")) == 10 and report.accounting["agent"]["dify"]["cached"] == 0
        assert evaluate("dify-app", root=project).accounting["agent"]["dify"]["cached"] == 5  # its own cache

        with pytest.raises(KeyboardInterrupt):
            evaluate("dify-app", root=project, use_cache=False, progress=Progress(on_item=crash_after(2)))
        server.app_key = APP_KEY
        monkeypatch.setenv("DIFY_APP_KEY", APP_KEY)
        resumed = evaluate("dify-app", root=project, use_cache=False, progress=Progress(on_warning=warnings.append))
    assert resumed.resumed == 0 and resumed.complete and len(resumed.records) == 5
    assert any("was answered with another key (another app): starting a new run" in w for w in warnings), warnings
    assert APP_KEY not in " ".join(warnings)


def test_an_interrupted_eval_resumes_without_asking_the_app_again(project, keys):

    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=1))
        with pytest.raises(KeyboardInterrupt):
            evaluate("dify-app", root=project, use_cache=False, progress=Progress(on_item=crash_after(2)))
        report = evaluate("dify-app", root=project, use_cache=False)
    assert report.resumed == 2 and report.complete and len(report.records) == 5
    assert len(server.replies("chat_messages")) == 5, "each question was asked once across both processes"


def test_the_app_key_never_reaches_params_tags_artifacts_logs_or_caches(project, keys, caplog):
    caplog.set_level(logging.DEBUG)
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=2))
        report = evaluate("dify-app", root=project)
    assert server.exchanges[-1].request.headers["authorization"] == f"Bearer {APP_KEY}"  # it was sent...
    files = [p for p in project.rglob("*") if p.is_file()]
    assert any("agents" in p.parts for p in files) and any("mlruns" in p.parts for p in files)
    assert not [p for p in files if APP_KEY[4:].encode() in p.read_bytes()]  # ...and written nowhere
    assert APP_KEY not in caplog.text and APP_KEY not in str(report.params)


def test_a_refused_app_key_stops_the_eval_before_it_asks_anything(project, keys, monkeypatch):
    monkeypatch.setenv("DIFY_APP_KEY", "app-not-the-right-key-0000")
    with dify_server(project) as server:
        write_spec(project, "dify-app", DIFY_AGENT.format(url=server.base_url, n=2))
        with pytest.raises(RagtrackError, match=r"HTTP 401.*is \$DIFY_APP_KEY the app's API key"):
            evaluate("dify-app", root=project)
    assert [e.request.path for e in server.exchanges] == ["/v1/info"], "no question was asked"


# ---------------------------------------------------------------------------------------- RAGFlow
def ragflow_server(project: Path, **kw) -> RagflowServer:
    return RagflowServer(project / "golden" / "kb", api_key=RAGFLOW_KEY, max_chars=300, **kw)


def ragflow_agent(server: RagflowServer) -> str:
    return (
        f'kind = "ragflow"\nbase_url = "{server.base_url}"\napi_key_env = "RAGFLOW_KEY"\nchat_id = "{server.chat_id}"\n'
    )


def ragflow_chunks(body) -> list[str]:
    return [c["id"] for c in body["choices"][0]["message"]["reference"]]


def chunk_ids(body) -> list[str]:
    return [c["id"] for c in body["data"]["chunks"]]


def test_a_ragflow_assistant_answers_with_references_mapped_by_text(project, keys):
    with ragflow_server(project) as server:
        write_spec(project, "ragflow-app", ragflow_agent(server))
        report = evaluate("ragflow-app", root=project)
    sent = server.replies("chat_completions")[0].request
    assert sent.path == f"/api/v1/chats_openai/{server.chat_id}/chat/completions"
    assert sent.body["stream"] is False and sent.body["model"] == "model"
    assert sent.body["reference"] is True and sent.body["extra_body"] == {"reference": True}  # both versions' flags
    check_against_server(report, server, "chat_completions", ragflow_chunks, RAGFLOW_SEGMENTS)
    assert all("[ID:" not in r.answer for r in report.records)  # citation marks are not part of the answer
    assert report.params["mode"] == "chat" and report.accounting["agent"]["ragflow"]["tokens_in"] > 0


def test_ragflow_on_either_chat_path_and_through_the_retrieval_api(project, keys):
    with ragflow_server(project, chat_routes=("openai",)) as server:  # a RAGFlow without the old path
        write_spec(project, "ragflow-new", ragflow_agent(server))
        report = evaluate("ragflow-new", root=project)
    assert report.complete and not any(r.errors for r in report.records)
    statuses = [x.response.status for x in server.exchanges if x.request.handler != "list_chats"]
    # Each of the (up to 4) first requests in flight falls back once; then the path is remembered.
    assert statuses.count(200) == 5 and 1 <= statuses.count(404) <= 4 and statuses[-1] == 200
    assert server.exchanges[-1].request.path.startswith("/api/v1/openai/")

    with ragflow_server(project) as server:
        agent = (
            f'kind = "ragflow"\nbase_url = "{server.base_url}/api/v1"\napi_key_env = "RAGFLOW_KEY"\n'
            f'retrieval_only = true\ndataset_ids = ["{server.dataset_id}"]\npage_size = 3\nsimilarity_threshold = 0.0\n'
        )
        write_spec(project, "ragflow-retrieval", agent)
        report = evaluate("ragflow-retrieval", root=project)
    body = server.replies("retrieval")[0].request.body
    assert body["dataset_ids"] == [server.dataset_id] and body["page_size"] == 3 and body["highlight"] is False
    check_against_server(report, server, "retrieval", chunk_ids, RAGFLOW_SEGMENTS, k=3)  # top_k: page_size
    assert all(r.judges == {} for r in report.records) and "correctness" not in report.metrics


def test_a_wrong_ragflow_key_chat_id_or_dataset_stops_before_the_first_question(project, keys, monkeypatch):
    """Each asked every question (eight refusals, a logged empty run, exit 1)."""
    with ragflow_server(project, old=True) as server:
        write_spec(project, "ragflow-app", ragflow_agent(server))
        monkeypatch.setenv("RAGFLOW_KEY", "ragflow-not-the-right-key")
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "ragflow-app"])
        assert result.exit_code == 2 and "API key is invalid" in result.output, result.output
        assert "is $RAGFLOW_KEY this RAGFlow's API key?" in result.output and "ragflow-not-the" not in result.output
        monkeypatch.setenv("RAGFLOW_KEY", RAGFLOW_KEY)
        write_spec(project, "ragflow-app", ragflow_agent(server).replace(server.chat_id, "0" * 32))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "ragflow-app"])
        assert result.exit_code == 2 and f"chat_id: no chat assistant {'0' * 32} for this key" in result.output
        assert [x.request.handler for x in server.exchanges] == ["list_chats", "list_chats"]
    with ragflow_server(project) as server:
        agent = (
            f'kind = "ragflow"\nbase_url = "{server.base_url}"\napi_key_env = "RAGFLOW_KEY"\n'
            f'retrieval_only = true\ndataset_ids = ["{server.dataset_id}", "{"f" * 32}"]\n'
        )
        write_spec(project, "ragflow-retrieval", agent)
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "ragflow-retrieval"])
        assert result.exit_code == 2 and f"dataset_ids: no dataset {'f' * 32} for this key" in result.output
        assert [x.request.handler for x in server.exchanges] == ["list_datasets", "list_datasets"]


def test_ragflow_errors_sent_with_http_200_are_item_errors_and_not_retried(project, keys):
    with ragflow_server(project, old=True) as server:
        write_spec(project, "ragflow-app", ragflow_agent(server))
        server.inject(*[Fault("llm_error")] * 5)
        report = evaluate("ragflow-app", root=project)
    assert len(server.replies("chat_completions")) == 5, "a refusal is not retried"
    assert all(r.retrieval == {} and not r.answered and r.judges == {} for r in report.records)
    assert report.metrics["counts/unanswered"] == 5 and "correctness" not in report.metrics  # nothing to judge
    assert "model provider refused" in report.records[0].errors[0] and report.metrics["counts/agent_errors"] == 5

    with ragflow_server(project) as server:
        write_spec(project, "ragflow-app", ragflow_agent(server) + "max_concurrency = 1\n")
        server.inject(Fault("no_reference"))
        report = evaluate("ragflow-app", root=project, use_cache=False)
        assert "no reference" in report.records[0].errors[0] and report.metrics["counts/retrieval_reported"] == 4
        # A 500 or 429 (a proxy in front of RAGFlow, with its envelope) is retried, not a refusal.
        server.inject(Fault("500"), Fault("429", 0.05))
        report = evaluate("ragflow-app", root=project, use_cache=False)
    assert report.complete and not any(r.errors for r in report.records)
    assert report.accounting["agent"]["ragflow"]["retries"] == 2


# ---------------------------------------------------------------------------------------- Coze
COZE_TOKEN = "pat_loopback3c5e7a9b1d2f4e6a"


def coze_server(project: Path, **kw) -> CozeServer:
    return CozeServer(project / "golden" / "kb", token=COZE_TOKEN, max_chars=200, **kw)


def coze_agent(server: CozeServer, extra: str = "") -> str:
    return (
        f'kind = "coze"\nbase_url = "{server.base_url}"\napi_key_env = "COZE_TOKEN"\n'
        f'bot_id = "{server.bot_id}"\npoll_interval_s = 0.01\n{extra}'
    )


def check_against_recall(report, server: CozeServer) -> None:
    """Every item's contexts are the slices the bot recalled (chunked as Dify's automatic mode does, so
    mapped as DIFY_SEGMENTS works out), and its retrieval metrics equal the hand computation from them."""
    chats = {c.question: c for c in server.chats.values() if c.status == "completed"}
    for record in report.records:
        recalled = chats[record.question].hits
        assert [c.text for c in record.contexts] == [s.text for s, _ in recalled], record.id
        units = [DIFY_SEGMENTS[(s.document.name, s.position)] for s, _ in recalled]
        assert [c.passage_ids for c in record.contexts] == units, record.id
        assert all(c.mapping == "text 1.00" for c in record.contexts)
        assert record.retrieval == pytest.approx(by_hand(units, record.gt_context_ids)), record.id


@pytest.mark.parametrize("studio", [False, True], ids=["coze.cn", "coze-studio"])
def test_a_coze_bot_is_evaluated_with_its_knowledge_recall_mapped_by_text(project, monkeypatch, studio):
    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project, steps=3, studio=studio) as server:  # each chat runs for three status checks
        write_spec(project, "coze-bot", coze_agent(server))
        report = evaluate("coze-bot", root=project)
    assert report.complete and len(report.records) == 5 and not any(r.errors for r in report.records)
    check_against_recall(report, server)
    assert all(
        r.answer and r.answer == extractive_answer(r.question, [s for s, _ in server_hits(server, r)])
        for r in report.records
    )
    p = report.params
    assert p["agent_kind"] == p["platform"] == "coze" and p["bot_id"] == server.bot_id
    assert p["bot_name"] == server.bot_name and p["base_url"] == server.base_url  # from GET /v1/bots/{id}
    usage = report.accounting["agent"]["coze"]
    assert usage["calls"] == 5 and usage["tokens_in"] > 0, "a chat is one call, however many requests it took"
    handlers = [x.request.handler for x in server.exchanges]
    assert handlers.count("create_chat") == 5 and handlers.count("retrieve_chat") == 15
    sent = server.replies("create_chat")[0].request.body
    assert sent["stream"] is False and sent["auto_save_history"] is True and sent["user_id"] == "ragtrack"
    assert sent["bot_id"] == server.bot_id and "conversation_id" not in sent  # a new conversation each time
    assert len({c.conversation_id for c in server.chats.values()}) == 5
    assert server.exchanges[-1].request.headers["authorization"] == f"Bearer {COZE_TOKEN}"  # it was sent...
    files = [p for p in project.rglob("*") if p.is_file()]
    assert not [p for p in files if COZE_TOKEN[4:].encode() in p.read_bytes()]  # ...and written nowhere


def server_hits(server: CozeServer, record) -> list:
    return next(c.hits for c in server.chats.values() if c.question == record.question)


def test_coze_chats_that_fail_stop_for_input_or_recall_nothing_are_item_errors(project, monkeypatch):
    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project) as server:
        write_spec(project, "coze-bot", coze_agent(server, "max_concurrency = 1\n"))
        server.inject(Fault("failed"), Fault("requires_action"), Fault("no_recall"))  # the first three items
        report = evaluate("coze-bot", root=project, use_cache=False)
    failed, waiting, unknown = report.records[:3]
    assert failed.errors == ["coze: the chat failed: 5000 the model service failed"] and not failed.answered
    assert "requires_action" in waiting.errors[0] and not waiting.answered
    assert unknown.answered and unknown.contexts == [] and "no knowledge recall" in unknown.errors[0]
    assert sorted(unknown.judges) == ["correctness", "relevance"]  # judged on its answer alone
    assert report.metrics["counts/retrieval_reported"] == 2 and not any(r.errors for r in report.records[3:])

    with coze_server(project) as server:  # Coze's rate limit (HTTP 200, code 4013) and a gateway's 429
        write_spec(project, "coze-bot", coze_agent(server, "max_concurrency = 1\n"))
        server.inject(Fault("rate_limited"), Fault("429", 0.05), Fault("500"))
        report = evaluate("coze-bot", root=project, use_cache=False)
    assert report.complete and not any(r.errors for r in report.records)
    assert report.accounting["agent"]["coze"]["retries"] == 3


def test_two_bots_that_return_different_numbers_of_slices_are_compared_with_that_said(project, monkeypatch):
    """Both logged their rank cut-off as "contexts", so nDCG cut at 2 against up to 4 went unremarked."""
    from ragtrack.api import compare

    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project, top_n=2) as two, coze_server(project, top_n=4) as four:
        write_spec(project, "coze-2", coze_agent(two))
        write_spec(project, "coze-4", coze_agent(four))
        evaluate("coze-2", root=project)
        evaluate("coze-4", root=project)  # the tiny KB gives 2 to 4 slices a question
        report = compare("coze-2", "coze-4", root=project, log=False)
        write_spec(project, "coze-4b", coze_agent(four).replace("0.01", "0.02"))  # another spec, same bot
        evaluate("coze-4b", root=project)
        same = compare("coze-4", "coze-4b", root=project, log=False)
    assert "nDCG and all_hops_at_k are cut at each version's own k (2 vs 2–4)" in report.warnings[0]
    assert not any("nDCG" in w for w in same.warnings)


def test_a_coze_chat_still_running_at_the_timeout_is_cancelled(project, monkeypatch):
    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project, steps=10**6) as server:  # a chat that never ends
        write_spec(project, "coze-slow", coze_agent(server, "timeout_s = 0.3\n").replace("0.01", "0.05"))
        report = evaluate("coze-slow", root=project, limit=1)
    (record,) = report.records
    assert record.errors == ["coze: the chat was still in_progress after 0.3 s (timeout_s)"]
    assert [c.status for c in server.chats.values()] == ["canceled"], "the bot does not keep working on it"


def test_an_interrupted_eval_cancels_the_coze_chats_it_leaves_running(project, monkeypatch):
    """Ctrl-C left chats running on Coze (the bot kept spending tokens) and a worker polling them until
    timeout_s; so did a chat that stopped for input (requires_action)."""
    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project) as server:
        write_spec(project, "coze-bot", coze_agent(server, "max_concurrency = 2\nmin_concurrency = 2\n"))
        server.inject(Fault("running"))  # the first question's chat never ends; the second's does
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            evaluate("coze-bot", root=project, use_cache=False, progress=Progress(on_item=crash_after(1)))
        while time.monotonic() - started < 10 and "canceled" not in [c.status for c in server.chats.values()]:
            time.sleep(0.05)
        # two workers post at once, so the chat that met the fault is not always the first one listed
        assert [c.status for c in server.chats.values() if c.fault == "running"] == ["canceled"]
        assert time.monotonic() - started < 10, "not waited for until timeout_s (120 s)"

        server.inject(Fault("requires_action"))
        report = evaluate("coze-bot", root=project, use_cache=False, limit=1)
    assert "requires_action" in report.records[0].errors[0]
    assert list(server.chats.values())[-1].status == "canceled"


def test_a_wrong_coze_token_or_bot_stops_before_the_first_question(project, monkeypatch):
    monkeypatch.setenv("COZE_TOKEN", "pat_not_the_right_token")
    with coze_server(project) as server:
        write_spec(project, "coze-bot", coze_agent(server))
        with pytest.raises(RagtrackError, match=r"HTTP 401 4100.*is \$COZE_TOKEN a token of this Coze"):
            evaluate("coze-bot", root=project)
        monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
        write_spec(project, "coze-bot", coze_agent(server).replace(server.bot_id, "7" * 19))
        with pytest.raises(RagtrackError, match=r"bot_id 7{19}: HTTP 200 4200: .* does not exist"):
            evaluate("coze-bot", root=project)
    assert [x.request.handler for x in server.exchanges] == ["bot_info", "bot_info"], "no question was asked"
    assert not logged_runs(project)
    write_spec(project, "coze-bot", coze_agent(server).replace(f'"{server.bot_id}"', '"my-bot"'))
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "coze-bot"])
    assert result.exit_code == 2 and "coze-bot.toml:9" in result.output, result.output
    assert "a Coze bot ID is a number" in result.output
    for value in ("1.5", "true"):  # said the same way (not "write it as "1.5"", refused next)
        write_spec(project, "coze-bot", coze_agent(server).replace(f'"{server.bot_id}"', value))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "coze-bot"])
        assert result.exit_code == 2 and "a Coze bot ID is a number" in result.output, result.output
    # An unquoted ID is a TOML integer, full-width digits are what a Chinese IME types: the same ID.
    full_width = "".join(chr(ord(d) + 0xFEE0) for d in server.bot_id)
    for written in (server.bot_id, f'"{full_width}"'):
        write_spec(project, "coze-bot", coze_agent(server).replace(f'"{server.bot_id}"', written))
        assert load_spec("coze-bot", project / "pipelines").spec.agent.bot_id == server.bot_id

    # A token pasted where its variable's name belongs: refused, and never echoed.
    token = "pat_" + "Ab3" * 20
    write_spec(project, "coze-bot", coze_agent(server).replace('"COZE_TOKEN"', f'"{token}"'))
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "coze-bot"])
    assert result.exit_code == 2 and "agent.api_key_env: must name an environment variable" in result.output
    assert token not in result.output and token[:12] not in result.output


def test_a_coze_base_url_without_the_bot_routes_is_said_and_an_older_coze_is_asked_the_old_way(project, monkeypatch):
    monkeypatch.setenv("COZE_TOKEN", COZE_TOKEN)
    with coze_server(project) as server:
        write_spec(project, "coze-bot", coze_agent(server).replace(server.base_url, server.base_url + "/api"))
        with pytest.raises(RagtrackError, match=r"neither /v1/bots/\d+ nor /v1/bot/get_online_info .* base_url"):
            evaluate("coze-bot", root=project)

    class OlderCoze(CozeServer):  # no /v1/bots/{bot_id}: only the older route describes the bot
        def bot_info(self, request, bot):
            return self.not_found(request)

    with OlderCoze(project / "golden" / "kb", token=COZE_TOKEN, max_chars=200) as server:
        write_spec(project, "coze-old", coze_agent(server))
        report = evaluate("coze-old", root=project, limit=1)
    assert report.complete and report.params["bot_name"] == server.bot_name
    assert [x.request.handler for x in server.exchanges][:2] == ["bot_info", "bot_online_info"]


# ---------------------------------------------------------------------------------------- any endpoint
class AskServer(LoopbackServer):
    """Somebody's own RAG service: POST /ask → {"data": {"answer", "sources": [{chunk_id, text, score}]}}."""

    ROUTES = [("POST", r"/ask", "ask")]

    def __init__(self, kb: Path, token: str):
        super().__init__()
        self.token, self.knowledge = token, Knowledge(kb, dify_chunks, 200)

    def error(self, status: int, code: str, message: str) -> Response:
        return Response(status, {"error": {"code": code, "message": message}})

    def ask(self, request: Request) -> Response:
        if bearer(request) != self.token:
            return self.error(401, "auth", "bad token")
        hits = self.knowledge.search(request.body["q"], request.body["k"])
        sources = [{"chunk_id": s.id, "text": s.text, "score": score} for s, score in hits]
        return Response(200, {"data": {"answer": hits[0][0].text.split("\n")[-1], "sources": sources}})


def test_any_json_endpoint_with_a_body_template_and_json_paths(project, keys, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-7f6e5d4c3b2a1908")
    with AskServer(project / "golden" / "kb", "tok-7f6e5d4c3b2a1908") as server:
        agent = (
            f'kind = "http"\nurl = "{server.base_url}/ask"\n'
            'headers = { Authorization = "Bearer ${MY_SERVICE_TOKEN}", X-Team = "search" }\n'
            'body = { q = "{question}", k = 2, tags = ["eval", "{question}"] }\n'
            'answer_path = "data.answer"\ncontexts_path = "data.sources"\ncontext_id = "chunk_id"\n'
        )
        write_spec(project, "my-service", agent)
        report = evaluate("my-service", root=project)
    first = server.exchanges[0].request
    assert first.headers["x-team"] == "search" and first.body["tags"][1] == first.body["q"]
    assert report.params["spec.agent.headers.Authorization"] == "Bearer ${MY_SERVICE_TOKEN}"  # the template only
    check_against_server(report, server, "ask", lambda b: [s["chunk_id"] for s in b["data"]["sources"]], DIFY_SEGMENTS)

    # A wrong answer_path: every reply is unreadable. Nothing was measured, and the CLI says why
    # once (not five times, and not only inside items.jsonl) and exits 1.
    with AskServer(project / "golden" / "kb", "tok-7f6e5d4c3b2a1908") as again:
        write_spec(project, "my-service", agent.replace(server.base_url, again.base_url).replace(".answer", ".reply"))
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "my-service", "--no-cache"])
    assert result.exit_code == 1, result.output
    assert "5 of 5 questions got no answer" in result.output and "did not say what was retrieved" not in result.output
    assert "5 items (a1, a2, b1, c1, …): http: the reply has no text at answer_path 'data.reply'" in result.output
    assert "no question got an answer" in result.output
    # Comparing with it printed an empty table and logged it as a comparison.
    evaluate("v1", root=project)
    result = CliRunner().invoke(main, ["--root", str(project), "compare", "v1", "my-service"])
    assert result.exit_code == 2 and "my-service's latest eval" in result.output, result.output
    assert "got no answer to any question: nothing to compare" in result.output


class EchoServer(AskServer):
    """A service that says what it was sent: the token in its answer and in a context's text."""

    def ask(self, request: Request) -> Response:
        reply = super().ask(request)
        token = request.headers["authorization"]
        reply.body["data"]["answer"] += f" (asked with {token})"
        reply.body["data"]["sources"][0]["text"] += f"\ntoken={bearer(request)}"
        return reply


def test_a_key_the_agent_echoes_is_redacted_from_answers_contexts_records_and_caches(project, monkeypatch):
    token = "tok-5e4d3c2b1a09f8e7"
    monkeypatch.setenv("MY_SERVICE_TOKEN", token)
    with EchoServer(project / "golden" / "kb", token) as server:
        agent = (
            f'kind = "http"\nurl = "{server.base_url}/ask"\n'
            'headers = { Authorization = "Bearer ${MY_SERVICE_TOKEN}" }\nbody = { q = "{question}", k = 2 }\n'
            'answer_path = "data.answer"\ncontexts_path = "data.sources"\ncontext_id = "chunk_id"\n'
        )
        write_spec(project, "echo-service", agent)
        report = evaluate("echo-service", root=project)
    assert "(asked with Bearer ***)" in report.records[0].answer
    assert report.records[0].contexts[0].text.endswith("token=***")
    assert not [p for p in project.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


# ---------------------------------------------------------------------------------------- Python
CALLABLE = '''
def answer(question):
    """A toy RAG function: the corpus sentence about cfg, whatever the question."""
    text = "The cfg value defaults to 8.0 and sets how closely the prompt is followed."
    return {"answer": text, "contexts": [
        {"id": "c1", "text": text, "doc_id": "guides/sampler.md", "score": 0.9},
        {"id": "c2", "text": "Nothing in the corpus reads like this sentence at all."},
    ]}
'''

RUNNABLE = """
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda


def _chain(inputs):
    docs = [
        Document(page_content="Full checkpoints go in models/checkpoints and load with the checkpoint loader.",
                 metadata={"source": "kb/guides/models.md", "chunk_id": "ckpt"}),
        Document(page_content="The preview node shows images without saving them."),
    ]
    return {"query": inputs["query"], "result": "Put them in models/checkpoints.", "source_documents": docs}


chain = RunnableLambda(_chain)
"""


def test_a_python_callable_and_a_langchain_runnable(project):
    (project / "toy_rag_fn.py").write_text(CALLABLE)
    declared = 'prompt_file = "prompts/answer_plain.md"'  # a declared prompt: hashed and logged
    write_spec(project, "py-fn", 'kind = "python"\ntarget = "toy_rag_fn:answer"\nmax_concurrency = 2\n', declared)
    report = evaluate("py-fn", root=project)
    prompt = (project / "pipelines" / "prompts" / "answer_plain.md").read_text()
    assert report.params["prompt_hash"] == hashlib.sha256(prompt.encode()).hexdigest()[:12]
    assert report.params["spec.prompt.declared.prompt_file.hash"] == report.params["prompt_hash"]
    record = report.records[0]
    assert [c.passage_ids for c in record.contexts] == [[CFG], []]
    assert [c.mapping for c in record.contexts] == ["text 1.00", "unmapped"]
    assert record.retrieved_passage_ids == [CFG, "unmapped:c2"]
    assert report.metrics["mapping/unmapped_share"] == 0.5 and report.params["target_type"] == "callable"
    a1 = next(r for r in report.records if r.id == "a1")  # GT: the cfg passage → found at rank 1 of 2
    assert a1.retrieval == pytest.approx(by_hand([[CFG], ["unmapped:c2"]], [CFG]))
    assert a1.retrieval["context_precision"] == 0.5
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "py-fn"])
    assert result.exit_code == 0 and "50% of the retrieved contexts map to no corpus passage" in result.output

    (project / "toy_rag_chain.py").write_text(RUNNABLE)
    write_spec(project, "py-chain", 'kind = "python"\ntarget = "toy_rag_chain:chain"\ninput_key = "query"\n')
    report = evaluate("py-chain", root=project)
    record = report.records[0]
    assert record.answer == "Put them in models/checkpoints." and report.params["target_type"] == "runnable"
    assert [c.unit_id for c in record.contexts] == ["ckpt", "context@2"]
    assert [c.passage_ids for c in record.contexts] == [[CHECKPOINTS], ["notes.txt"]]


def test_editing_a_python_agents_module_makes_a_new_version(project):
    """Its code is the agent, as a prompt is: a change registers a new model version; line ends do not."""
    from ragtrack.spec import load_spec

    (project / "toy_rag_fn.py").write_text(CALLABLE)
    write_spec(project, "py-fn", 'kind = "python"\ntarget = "toy_rag_fn:answer"\n')
    first = evaluate("py-fn", root=project)
    assert first.params["spec.code.toy_rag_fn.py.hash"] == hashlib.sha256(CALLABLE.encode()).hexdigest()[:12]
    (project / "toy_rag_fn.py").write_bytes(CALLABLE.replace("\n", "\r\n").encode())
    assert load_spec("py-fn", project / "pipelines", project).hash == first.params["spec_hash"]
    (project / "toy_rag_fn.py").write_text(CALLABLE + "\n# tuned\n")
    second = evaluate("py-fn", root=project)
    assert second.params["spec_hash"] != first.params["spec_hash"]
    assert second.model_version != first.model_version
    # A module that is not a file of the project (here: installed with Python) is not part of the hash.
    write_spec(project, "py-json", 'kind = "python"\ntarget = "json:dumps"\n')
    assert load_spec("py-json", project / "pipelines", project).code == {}
    # In a folder of its own, the helpers it imports are the agent too: editing agent/retriever.py kept the
    # spec hash, the cached answers and the champion's model version. At the root, only the module is.
    (project / "agent" / "tools").mkdir(parents=True)
    (project / "agent" / "rag.py").write_text("from retriever import search\n")
    (project / "agent" / "retriever.py").write_text("def search(q):\n    return []\n")
    (project / "agent" / "tools" / "rank.py").write_text("K = 3\n")
    write_spec(project, "py-folder", 'kind = "python"\ntarget = "rag:answer"\npath = "agent"\n')
    code = load_spec("py-folder", project / "pipelines", project).code
    assert sorted(code) == ["agent/rag.py", "agent/retriever.py", "agent/tools/rank.py"]
    (project / "agent" / "retriever.py").write_text("def search(q):\n    return ['tuned']\n")
    assert (
        load_spec("py-folder", project / "pipelines", project).code["agent/retriever.py"] != code["agent/retriever.py"]
    )
    assert list(load_spec("py-fn", project / "pipelines", project).code) == ["toy_rag_fn.py"]


def test_a_callable_that_raises_or_returns_only_text_is_an_item_error(project):
    (project / "toy_rag_bad.py").write_text(
        "def boom(q):\n    raise RuntimeError('index not loaded')\n\ndef text_only(q):\n    return 'just words'\n"
    )
    write_spec(project, "py-boom", 'kind = "python"\ntarget = "toy_rag_bad:boom"\n')
    report = evaluate("py-boom", root=project)
    assert report.complete and report.records[0].errors == ["python: RuntimeError: index not loaded"]
    write_spec(project, "py-text", 'kind = "python"\ntarget = "toy_rag_bad:text_only"\n')
    report = evaluate("py-text", root=project)
    assert "only an answer" in report.records[0].errors[0] and report.metrics["counts/retrieval_reported"] == 0


def test_a_context_that_is_no_text_makes_the_items_retrieval_unknown_not_a_passage():
    """A stray 17 in the contexts was read as the text "17" and matched a passage that says 17."""
    from ragtrack.agents.python import read_output

    reply = read_output({"answer": "Seventeen steps.", "contexts": ["Steps: 17.", 17, None]})
    assert reply.answer == "Seventeen steps." and reply.contexts is None
    assert reply.problem == "context 2 is int '17'; expected text, a dict with text or a Document"


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        (
            {"response": "misnamed", "contexts": []},
            "the output has no answer (answer/result/output/text; its keys: response, contexts)",
        ),
        ({"answer": None, "contexts": []}, "the answer (answer) is None"),
    ],
    ids=["misnamed-key", "none"],
)
def test_an_output_without_an_answer_is_an_item_error_not_an_empty_answer(project, returned, error):
    """Scored as an empty answer, every judge gave it 1 and nothing said why."""
    (project / "toy_rag_silent.py").write_text(f"def answer(q):\n    return {returned!r}\n")
    write_spec(project, "py-silent", 'kind = "python"\ntarget = "toy_rag_silent:answer"\n')
    report = evaluate("py-silent", root=project)
    assert [(r.answered, r.errors) for r in report.records] == [(False, [f"python: {error}"])] * len(report.records)


def test_versions_with_same_named_modules_in_their_own_folders_each_run_their_own(project):
    """A notebook evaluating v1 then v2 (``agent_v1/rag.py``, ``agent_v2/rag.py``) got v1's module
    twice: Python's module cache answered the second import."""
    for n in (1, 2):  # each with a helper of the same name, which the second version got from the first
        (project / f"agent_v{n}").mkdir()
        (project / f"agent_v{n}" / "helper.py").write_text(f"NAME = 'v{n}'\n")
        (project / f"agent_v{n}" / "rag.py").write_text(
            "from helper import NAME\n\ndef answer(q):\n    return {'answer': NAME, 'contexts': []}\n"
        )
        write_spec(project, f"py-v{n}", f'kind = "python"\ntarget = "rag:answer"\npath = "agent_v{n}"\n')
    answers = [evaluate(v, root=project, limit=1).records[0].answer for v in ("py-v1", "py-v2", "py-v1")]
    assert answers == ["v1", "v2", "v1"]


@pytest.mark.parametrize(
    ("module", "target", "message"),
    [
        ("def answer(q)\n    return {}\n", "broken:answer", "cannot load broken:answer: {file}:1: expected ':'"),
        ("open('/no/such/index.faiss')\n", "broken:answer", "importing broken failed: FileNotFoundError"),
        ("import numpyy\n", "broken:answer", "broken imports numpyy, which is not installed in this Python"),
        ("def answr(q):\n    return {}\n", "broken:answer", "broken has no attribute 'answer' (did you mean 'answr'?)"),
        ("", "broken.answer", "expected module:attribute, e.g. my_rag.chain:answer (got 'broken.answer')"),
    ],
    ids=["syntax", "raises-on-import", "missing-dependency", "attribute-typo", "dot-not-colon"],
)
def test_a_module_that_cannot_be_loaded_is_one_line_at_the_targets_line(project, module, target, message):
    (project / "broken.py").write_text(module)
    write_spec(project, "py-broken", f'kind = "python"\ntarget = "{target}"\n')
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "py-broken"])
    spec = project / "pipelines" / "py-broken.toml"
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{spec}:7: agent.target: " in result.output
    assert message.format(file=project / "broken.py") in " ".join(result.output.split()), result.output


DOWN_THEN_UP = """
from pathlib import Path


def answer(q):
    if Path(__file__).with_name("down").exists():
        raise ConnectionError("index server down")
    return {"answer": "The cfg value defaults to 8.0.", "contexts": [{"id": "c1", "text": "cfg defaults to 8.0"}]}
"""


def test_an_agent_that_keeps_failing_stops_the_run_and_the_resume_asks_its_questions_again(project):
    import json

    from ragtrack.tracking.store import Tag, open_store
    from ragtrack.tracking.traces import item_traces

    golden = project / "golden" / "golden.jsonl"
    first = json.loads(golden.read_text().splitlines()[0])
    golden.write_text("".join(json.dumps({**first, "id": f"q{n}"}) + "\n" for n in range(12)))
    (project / "toy_rag_down.py").write_text(DOWN_THEN_UP)
    (project / "down").touch()
    write_spec(project, "py-down", 'kind = "python"\ntarget = "toy_rag_down:answer"\n')
    report = evaluate("py-down", root=project)
    assert not report.complete and "8 python calls failed in a row" in report.stopped_early
    assert len(report.records) == 8  # eight failed, each recorded (the 8th was once dropped); the 9th not asked
    # A failed call is not a wrong answer: no judge scored it, and the run says so.
    assert all(not r.answered and r.judges == {} and r.errors for r in report.records)
    assert report.metrics["counts/unanswered"] == 8 and report.metrics["counts/judged/correctness"] == 0

    (project / "down").unlink()  # the index server is back: the same command resumes
    report = evaluate("py-down", root=project)
    assert report.complete and report.resumed == 0, "the failed items were asked again, not kept"
    assert len(report.records) == 12 and all(r.answered and len(r.judges) == 4 for r in report.records)
    assert report.metrics["counts/unanswered"] == 0 and report.metrics["counts/judged/correctness"] == 12
    # Each item has one trace, of its new record: the failed items' first traces are gone.
    traces = item_traces(open_store(load_config(project)), report.run_id)
    assert {i: [t.tags[Tag.RECORD] for t in ts] for i, ts in traces.items()} == {
        r.id: [r.digest] for r in report.records
    }


def test_a_rerun_asks_the_items_that_failed_again_without_taking_them_for_an_outage(project):
    """Half the items fail (the agent raises on them), interleaved with answers: the re-run, answering
    the others from the cache, asked only the failing ones, counted 8 "in a row" and stopped."""
    import json

    golden = project / "golden" / "golden.jsonl"
    first = json.loads(golden.read_text().splitlines()[0])
    rows = [{**first, "id": f"q{n}", "question": f"{first['question']} ({n})"} for n in range(20)]
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (project / "toy_rag_half.py").write_text(
        "def answer(q):\n"
        "    if int(q.rsplit('(', 1)[1].rstrip(')')) % 2:\n"
        "        raise ValueError('no route for this question')\n"
        "    return {'answer': 'an answer', 'contexts': []}\n"
    )
    write_spec(project, "py-half", 'kind = "python"\ntarget = "toy_rag_half:answer"\n')
    for _ in range(2):
        report = evaluate("py-half", root=project)
        assert report.complete and not report.stopped_early, report.stopped_early
        assert sum(bool(r.errors) for r in report.records) == 10
    assert report.accounting["agent"]["python"]["cached"] == 10


# ---------------------------------------------------------------------------------------- specs
@pytest.mark.parametrize(
    "agent, message",
    [
        ('kind = "dify"\nbase_url = "http://x/v1"\napi_key_env = "K"\ntopk = 3', "agent.topk: unknown key"),
        ('kind = "dify"\nbase_url = "http://u:p@x/v1"\napi_key_env = "K"', "agent.base_url: the URL holds credentials"),
        ('kind = "dify"\nbase_url = "http://x/v1"\napi_key_env = "K"\nretrieval_only = true', "needs dataset_id"),
        ('kind = "ragflow"\nbase_url = "http://x"\napi_key_env = "K"', "chat_id is required"),
        (
            'kind = "dify"\nbase_url = "http://x/v1"\napi_key_env = "K"\nmin_concurrency = 8',
            "min_concurrency (8) is above max_concurrency (4)",
        ),
        ('kind = "http"\nurl = "http://x/ask?api_key=abc"', "agent.url: the URL's query holds 'api_key'"),
        ('kind = "python"\ntarget = "no colon"', "agent.target"),
        ('kind = "python"\ntarget = "m:f"\n\n[declared]\nprompt_file = "../../x.md"', "declared.prompt_file: "),
    ],
)
def test_spec_errors_name_their_key(project, agent, message):
    write_spec(project, "bad", agent)
    with pytest.raises(InputError, match=re.escape(message)):
        load_spec("bad", project / "pipelines")


def test_a_missing_key_variable_or_module_is_one_line_naming_the_field(project, monkeypatch):
    monkeypatch.delenv("DIFY_APP_KEY", raising=False)
    write_spec(project, "dify-app", DIFY_AGENT.format(url="http://127.0.0.1:9/v1", n=1))
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "dify-app"])
    spec_file = next((project / "pipelines").rglob("dify-app*.toml"))
    line = next(n for n, text in enumerate(spec_file.read_text().splitlines(), 1) if text.startswith("api_key_env"))
    assert result.exit_code == 2
    assert f"{spec_file.name}:{line}: agent.api_key_env: environment variable DIFY_APP_KEY is not set" in result.output
    write_spec(project, "py-missing", 'kind = "python"\ntarget = "no_such_module_here:fn"\n')
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "py-missing"])
    assert result.exit_code == 2 and "agent.target: cannot load no_such_module_here:fn" in result.output
    assert "Traceback" not in result.output
