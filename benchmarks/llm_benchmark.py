"""LLM-layer benchmark: judging N items × 4 judges against a loopback server of known speed.

The server (127.0.0.1, ragtrack's fake OpenAI-compatible server) answers every
request after a latency L (fixed, or spread uniformly around L with
``--latency-spread``, as replies of varying length are) and serves at most C
requests at once, queueing the rest in arrival order — like a local llama.cpp /
vLLM deployment. It runs in its own process,
as a real endpoint does (``--server-in-process`` puts it in the clients' process,
where its request handling competes with them for the GIL). The best any client can do
is N·calls·L / C seconds; the script prints each client's wall time divided by
that ideal (1.00 = perfect), its peak requests in flight and its failures:

* ragtrack, cold cache (adaptive concurrency, retries), and the same against a
  server that declares its slots as llama.cpp's does (``GET /props`` →
  ``total_slots``), where the limit starts at the capacity instead of probing;
* ragtrack, warm cache (expected: zero calls);
* ``ragtrack eval --version v1 --judge <server>`` end to end on the shipped golden
  set (offline answers and endpoint judging overlap; its ideal is items × 4 · L / C),
  then the next eval of the same project, which starts at the concurrency the first
  one learned; and the first eval against a server that declares its slots;
* a fixed pool of 16 workers (RAGAS's default worker count), same timeout;
* mlflow.genai.evaluate with an OpenAI-compatible judge, when it can run here;
* RAGAS ``evaluate`` (four LLM metrics), run by ``--ragas-python``: a Python
  with ragas installed (it needs langchain < 1; see ``ragas_client.py``).

    python benchmarks/llm_benchmark.py [--items 40] [--latency 0.25] [--latency-spread 0.3] [--capacity 2]
                                       [--min-concurrency 16] [--ragas-python PY]
                                       [--server-in-process]

Printed as ratios side by side: the machine is shared and noisy, absolute
seconds are not comparable between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from ragtrack import llm as llm_layer
from ragtrack.evaluation.judges import JudgeInput, judge_steps
from ragtrack.llm.client import LLM, RetryPolicy
from ragtrack.llm.fake_server import FakeOpenAIServer
from ragtrack.llm.memory import EndpointMemory
from ragtrack.llm.openai_backend import OpenAIBackend


def reply(request: dict) -> str:
    """One reply every client can read: ragtrack's judges take score/reason, MLflow's take result/rationale."""
    return '{"score": 4, "reason": "supported", "result": "yes", "rationale": "supported"}'


class Server:
    """The loopback server with what the benchmark reads of it: requests seen, peak in flight."""

    def __init__(self, latency: float, capacity: int, spread: float = 0.0, declare: bool = False):
        self._server = FakeOpenAIServer(
            reply=reply, latency_s=latency, latency_spread=spread, capacity=capacity, declare_slots=declare
        )
        self.base_url = self._server.base_url

    def __enter__(self) -> Server:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    def reset_peak(self) -> None:
        self._server.log.peak_in_flight = 0

    def requests(self) -> int:
        return len(self._server.log.requests)

    def peak(self) -> int:
        return self._server.log.peak_in_flight


def _serve(latency: float, capacity: int, spread: float, declare: bool, pipe) -> None:
    """Child process: run the server and answer the parent's questions about it."""
    with Server(latency, capacity, spread, declare) as server:
        pipe.send(server.base_url)
        for command in iter(pipe.recv, "stop"):
            pipe.send(getattr(server, command)())


class ServerProcess:
    """The same server in a child process: its HTTP handling does not share the clients' GIL."""

    def __init__(self, latency: float, capacity: int, spread: float = 0.0, declare: bool = False):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(latency, capacity, spread, declare, child), daemon=True)

    def __enter__(self) -> ServerProcess:
        self._process.start()
        self.base_url = self._pipe.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pipe.send("stop")
        self._process.join(timeout=10)

    def _ask(self, command: str):
        self._pipe.send(command)
        return self._pipe.recv()

    def reset_peak(self) -> None:
        self._ask("reset_peak")

    def requests(self) -> int:
        return self._ask("requests")

    def peak(self) -> int:
        return self._ask("peak")


def items(n: int) -> list[JudgeInput]:
    return [
        JudgeInput(
            f"What does setting {i} do?",
            f"Setting {i} controls step {i}.",
            f"It controls step {i}.",
            (f"Setting {i} controls step {i} of the sampler.",),
        )
        for i in range(n)
    ]


def ragtrack_run(
    server: Server | ServerProcess, inputs: list[JudgeInput], cache: Path, timeout: float, floor: int = 1
) -> dict:
    backend = OpenAIBackend(
        "bench",
        base_url=server.base_url,
        api_key="sk-bench",
        timeout_s=timeout,
        max_concurrency=16,
        min_concurrency=floor,
        memory=EndpointMemory(None),
    )
    llm = LLM(backend, cache_dir=cache, retry=RetryPolicy(max_attempts=5, base_delay_s=0.2))
    steps = judge_steps("en")
    before = server.requests()
    server.reset_peak()
    started = time.monotonic()

    jobs = [(step, inp) for inp in inputs for step in steps.values()]  # like the eval runner: every call a task
    with ThreadPoolExecutor(max_workers=llm.limiter.maximum) as pool:
        failed = sum(pool.map(lambda job: not llm.run(*job).ok, jobs))
    return {
        "wall": time.monotonic() - started,
        "calls": server.requests() - before,
        "peak": server.peak(),
        "failed": failed,
    }


def eval_run(server: Server | ServerProcess, timeout: float, floor: int = 1, times: int = 2) -> list[dict]:
    """``ragtrack eval --version v1 --judge <the server>`` on the shipped golden set, end to end, twice.

    The index is built first by an offline eval (not timed). Each timed eval answers every
    item (offline agent) and judges it on the server; its wall time is the item phase
    (answering and judging, which overlap), as reported by the API's progress hooks. The
    first meets the endpoint for the first time, so its limiter climbs from 4 requests in
    flight; the second starts at the limit the first one reached (remembered in the project's
    cache), as every later eval of a project against the same endpoint does.
    """
    from ragtrack.api import Progress, evaluate

    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(repo / "pipelines", root / "pipelines")
        shutil.copytree(repo / "golden", root / "golden")
        (root / "ragtrack.toml").write_text(
            f"[eval]\ntimeout_s = {timeout}\nmin_concurrency = {floor}\n\n"
            f'[profiles.bench]\nbase_url = "{server.base_url}"\nmodel = "bench"\n'
        )
        evaluate("v1", root=root)  # builds and caches the index
        runs = []
        for _ in range(times):
            marks: dict[str, float] = {}

            def stage(name: str, marks=marks) -> None:
                if name.startswith("logging"):
                    marks["end"] = time.monotonic()

            def start(total: int, resumed: int, marks=marks) -> None:
                marks["start"] = time.monotonic()

            llm_layer._limiters.clear()  # each eval as a new process: only the project's cache remembers
            before = server.requests()
            server.reset_peak()
            report = evaluate("v1", root=root, judge="bench", use_cache=False, progress=Progress(stage, start))
            failed = sum(v.error is not None for r in report.records for v in r.judges.values())
            runs.append(
                {
                    "wall": marks["end"] - marks["start"],
                    "calls": server.requests() - before,
                    "peak": server.peak(),
                    "failed": failed,
                    "items": len(report.records),
                }
            )
        return runs


def fixed_pool_run(server: Server | ServerProcess, inputs: list[JudgeInput], timeout: float, workers: int = 16) -> dict:
    """A naive client: every call submitted to a 16-thread pool at once, no adaptation."""
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench", timeout=timeout, max_retries=2)
    steps = judge_steps("en")
    jobs = [(step, inp) for inp in inputs for step in steps.values()]
    before = server.requests()
    server.reset_peak()
    started = time.monotonic()

    def call(job) -> bool:
        step, inp = job
        try:
            client.chat.completions.create(model="bench", messages=step.messages(inp), max_tokens=256, temperature=0)
            return True
        except openai.OpenAIError:
            return False

    with ThreadPoolExecutor(max_workers=workers) as pool:
        ok = sum(pool.map(call, jobs))
    return {
        "wall": time.monotonic() - started,
        "calls": server.requests() - before,
        "peak": server.peak(),
        "failed": len(jobs) - ok,
    }


def mlflow_genai_run(server: Server | ServerProcess, inputs: list[JudgeInput]) -> dict | str:
    """mlflow.genai.evaluate with four built-in judges on the same endpoint, if it can run here."""
    try:
        import mlflow
        from mlflow.genai.scorers import Correctness, Guidelines, RelevanceToQuery, RetrievalGroundedness  # noqa: F401
    except ImportError as e:
        return f"not available: {e}"
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.set_tracking_uri(f"sqlite:///{tmp}/m.db")
        model = "openai:/bench"
        scorers = [
            Correctness(model=model),
            RelevanceToQuery(model=model),
            Guidelines(name="organization", guidelines="The answer is well organised.", model=model),
            Guidelines(name="grounded", guidelines="The answer only states supported facts.", model=model),
        ]
        data = [
            {
                "inputs": {"question": i.question},
                "outputs": i.answer,
                "expectations": {"expected_response": i.gt_answer},
            }
            for i in inputs
        ]
        before = server.requests()
        server.reset_peak()
        started = time.monotonic()
        try:
            result = mlflow.genai.evaluate(data=data, scorers=scorers)
        except Exception as e:  # report, do not crash the benchmark
            return f"failed: {type(e).__name__}: {str(e)[:120]}"
        wall = time.monotonic() - started
        scored = sum(1 for k in result.metrics if k.endswith("/mean"))
    return {
        "wall": wall,
        "calls": server.requests() - before,
        "peak": server.peak(),
        "failed": f"{4 - scored} of 4 means missing" if scored < 4 else 0,
    }


def ragas_run(server: Server | ServerProcess, items_n: int, python: str) -> dict | str:
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-bench"}
    before = server.requests()
    server.reset_peak()
    script = Path(__file__).with_name("ragas_client.py")
    done = subprocess.run([python, str(script), "--items", str(items_n)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "wall": out["wall"],
        "calls": server.requests() - before,
        "peak": server.peak(),
        "failed": f"{out['nan']}/{out['scores']} NaN",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.25, help="seconds per request at the server")
    parser.add_argument("--capacity", type=int, default=2, help="requests the server computes at once")
    parser.add_argument(
        "--latency-spread",
        type=float,
        default=0.0,
        help="each request takes latency × (1 ± up to this), uniformly: replies of varying length (mean unchanged)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per request, seconds")
    parser.add_argument(
        "--min-concurrency", type=int, default=1, help="ragtrack's floor under its adaptive limit (16: a fixed pool)"
    )
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument("--skip-eval", action="store_true", help="skip the end-to-end `ragtrack eval` row")
    parser.add_argument("--ragas-python", help="a Python with ragas installed, to include RAGAS")
    parser.add_argument(
        "--server-in-process", action="store_true", help="run the server in this process (it then shares the GIL)"
    )
    args = parser.parse_args()

    inputs = items(args.items)
    calls = 4 * len(inputs)
    ideal = calls * args.latency / args.capacity
    serve = Server if args.server_in_process else ServerProcess
    where = "in this process" if args.server_in_process else "in its own process"
    print(
        f"{args.items} items × 4 judges = {calls} calls; server latency {args.latency}s"
        f"{f' ± {args.latency_spread:.0%}' if args.latency_spread else ''}, capacity {args.capacity}; "
        f"ideal wall time {ideal:.1f}s; server {where}\n"
    )
    rows = []
    with (
        serve(args.latency, args.capacity, args.latency_spread) as server,
        tempfile.TemporaryDirectory() as cache,
    ):
        run = partial(ragtrack_run, server, inputs, Path(cache), args.timeout, args.min_concurrency)
        rows.append(("ragtrack (cold cache)", run()))
        rows.append(("ragtrack (warm cache)", run()))
        with serve(args.latency, args.capacity, args.latency_spread, declare=True) as declaring:
            cold = ragtrack_run(declaring, inputs, Path(cache) / "declared", args.timeout, args.min_concurrency)
            rows.append(("  server declares slots", cold))
        rows.append(("fixed pool, 16 workers", fixed_pool_run(server, inputs, args.timeout)))
        if not args.skip_mlflow:
            rows.append(("mlflow.genai.evaluate", mlflow_genai_run(server, inputs)))
        if args.ragas_python:
            rows.append(("ragas.evaluate", ragas_run(server, args.items, args.ragas_python)))

    if not args.skip_eval:
        with serve(args.latency, args.capacity, args.latency_spread) as server:
            first, again = eval_run(server, args.timeout, args.min_concurrency)
        # Its own ideal: the shipped golden set's items × 4 judges.
        ideal_eval = 4 * first["items"] * args.latency / args.capacity
        rows.append((f"ragtrack eval v1 ({first['items']} items)", {**first, "ideal": ideal_eval}))
        rows.append(("  the next eval", {**again, "ideal": ideal_eval}))
        with serve(args.latency, args.capacity, args.latency_spread, declare=True) as declaring:
            (declared,) = eval_run(declaring, args.timeout, args.min_concurrency, times=1)
        rows.append(("  server declares slots", {**declared, "ideal": ideal_eval}))

    base = rows[0][1]["wall"]
    print(f"{'client':<28}{'wall/ideal':>11}{'vs ragtrack':>12}{'calls':>7}{'peak in flight':>16}  failed")
    for name, r in rows:
        if isinstance(r, str):
            print(f"{name:<28}{r}")
            continue
        ratios = f"{r['wall'] / r.get('ideal', ideal):>11.2f}{r['wall'] / base:>12.2f}"
        print(f"{name:<28}{ratios}{r['calls']:>7}{r['peak']:>16}  {r['failed']}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
