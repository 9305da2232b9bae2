"""Eval benchmark: offline v1 and v5, per item, against the floor — side by side with a baseline commit.

For each version and corpus size (the shipped KB, and the KB ×10: nine more copies
under renamed folders, so every golden ID still resolves) it runs ``ragtrack eval``
four times in a fresh project: the first run builds the index (timed as "index"),
the faster of the next two (cached index, the vector cache dropped before each: the
questions are new to the project, and so are the sentences of the units they
retrieve, which a first eval encodes as it goes) gives the per-item time and the
shares of the phases (items, logging), and the fourth ("seen") reuses the vectors
the others kept, as every later eval of the same golden set does. The floor, measured next in the same project, is
what an item cannot avoid: one batched query encode and one search of the
version's retrieval mode (best of three passes over the golden set). A second floor puts
every text the version encodes for the item into that one batch (for v5 its
rewrites and outline points too): the ratio to it is what the version spends
beyond model work its answers depend on.

    python benchmarks/eval_benchmark.py                       # this checkout
    python benchmarks/eval_benchmark.py --baseline HEAD~3     # and that commit, side by side

The baseline is checked out into a temporary git worktree and measured by this same
script in a subprocess, through the public ``ragtrack.api.evaluate`` only. A script,
not a test: timings depend on the machine and its load; read the ratios.
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
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
REPO = Path(__file__).resolve().parents[1]


def make_project(root: Path, repo: Path, scale: int) -> Path:
    """pipelines/ and the golden set of ``repo``; its KB, plus ``scale - 1`` copies under renamed folders."""
    shutil.copytree(repo / "pipelines", root / "pipelines")
    (root / "golden").mkdir(parents=True)
    shutil.copy(repo / "golden" / "golden.jsonl", root / "golden" / "golden.jsonl")
    shutil.copytree(repo / "golden" / "kb", root / "golden" / "kb")
    for n in range(1, scale):
        shutil.copytree(repo / "golden" / "kb", root / "golden" / "kb" / f"copy-{n:02d}")
    return root


def measure(version: str, scale: int, repo: Path, floors: bool) -> dict:
    """Four evals in a fresh project (cold index; twice cached with questions new to the project,
    the faster counts as warm; then with the questions' vectors kept, as seen);
    phase times from the API's progress hooks. With ``floors``, the floors are measured next, in
    the same project, so that a shared machine's load drifts as little as possible between them."""
    from ragtrack.api import Progress, evaluate

    with tempfile.TemporaryDirectory(prefix="ragtrack-bench-") as tmp:
        root = make_project(Path(tmp) / "project", repo, scale)
        figures: dict = {}
        for label in ("cold", "warm", "warm again", "seen"):
            if label.startswith("warm"):  # the vectors the cold run kept (a commit without them: no-op)
                shutil.rmtree(root / ".ragtrack" / "cache" / "vectors", ignore_errors=True)
            marks: dict[str, float] = {"begin": time.perf_counter()}

            def stage(name: str, marks=marks) -> None:
                if name.startswith("building"):
                    marks["build"] = time.perf_counter()
                elif name.startswith("logging"):
                    marks["logging"] = time.perf_counter()

            def start(total: int, resumed: int, marks=marks) -> None:
                marks["items"] = time.perf_counter()

            report = evaluate(version, root=root, progress=Progress(on_stage=stage, on_start=start))
            marks["end"] = time.perf_counter()
            n = len(report.records)
            figures[label] = {
                "index_s": marks["items"] - marks.get("build", marks["begin"]),
                "item_ms": (marks["logging"] - marks["items"]) / n * 1000,
                "logging_s": marks["end"] - marks["logging"],
                "total_s": marks["end"] - marks["begin"],
                "items": n,
                "recall": report.metrics["context_recall"],
                "correctness": report.metrics["correctness"],
                "scores": {k: v for k, v in report.metrics.items() if not k.startswith("usage/")},  # not work done
            }
        # Every run must score alike: a cache that changed an answer would show here.
        figures["identical"] = len({json.dumps(f["scores"], sort_keys=True) for f in figures.values()}) == 1
        figures["warm"] = min(figures.pop("warm again"), figures["warm"], key=lambda f: f["item_ms"])
        if floors:
            figures["floor_ms"], figures["own_floor_ms"] = floor_ms(version, root)
        return {"version": version, "scale": scale, **figures}


def floor_ms(version: str, root: Path) -> tuple[float, float]:
    """Two floors per golden question, in the project at ``root`` (its index cached), with this
    checkout's code.

    The floor: one batched query encode of the question + one search. The own-texts
    floor: every text the version encodes for that item (for v5 the question, its
    rewrites and its "question + point" texts) in one batch + one search: the model
    work an item cannot shed without changing its answers.
    """
    from ragtrack.agent import AgentContext
    from ragtrack.config import load_config
    from ragtrack.corpus import load_corpus
    from ragtrack.golden import load_golden
    from ragtrack.pipeline.agent import PipelineAgent
    from ragtrack.spec import load_spec

    corpus = load_corpus(root / "golden" / "kb")
    golden = load_golden(root / "golden" / "golden.jsonl", corpus)
    agent = PipelineAgent(load_spec(version, root / "pipelines"), AgentContext(corpus, load_config(root)))
    embedder, k = agent.embedder, agent.spec.retrieval.top_k

    def timed(texts_per_item: list[list[str]], passes: int = 3) -> float:
        """Best of ``passes``: a floor is a cost, and the least disturbed pass measures it best."""
        best = float("inf")
        for _ in range(passes):
            embedder.forget_recent()
            started = time.perf_counter()
            for item, texts in zip(golden.items, texts_per_item, strict=True):
                embedder.encode(texts)
                agent.search.search(item.question, k)
            best = min(best, time.perf_counter() - started)
        return best / len(golden) * 1000

    # What each answer encodes. The units' sentences and topics, read from the vector cache the evals
    # filled, stay kept by the embedder and are looked up below, as in a cached eval.
    own: list[list[str]] = []
    encode = embedder.encode

    def recording(texts: list[str], keep: bool = False):
        own[-1].extend(texts)
        return encode(texts, keep)

    embedder.encode = recording  # an instance attribute over the method, for these answers only
    try:
        for item in golden.items:
            own.append([])
            embedder.forget_recent()
            agent.answer(item.question)
    finally:
        del embedder.encode
    embedder.cache = None  # a floor is the model's work: no query vectors kept from the evals
    floor = timed([[item.question] for item in golden.items])
    return floor, timed([list(dict.fromkeys(texts)) for texts in own])


def baseline(rev: str, args: argparse.Namespace) -> list[dict]:
    """The same measurements on ``rev``, from a temporary worktree (its code, its pipelines and data)."""
    folder = Path(tempfile.mkdtemp(prefix="ragtrack-baseline-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), rev], check=True, capture_output=True
    )
    try:
        out = folder / "results.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--measure-only",
            "--repo",
            str(folder),
            "--json",
            str(out),
        ]
        cmd += ["--versions", *args.versions, "--scales", *map(str, args.scales)]
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(folder)})
        return json.loads(out.read_text())
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", nargs="+", default=["v1", "v5"])
    parser.add_argument("--scales", nargs="+", type=int, default=[1, 10])
    parser.add_argument("--baseline", help="A git revision to measure side by side (e.g. HEAD~1).")
    parser.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args()

    runs = []
    for version in args.versions:
        for scale in args.scales:
            print(f"measuring {version} on the KB x{scale} ({args.repo})", file=sys.stderr, flush=True)
            runs.append(measure(version, scale, args.repo, floors=not args.measure_only))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    if args.measure_only:
        return
    before = {(r["version"], r["scale"]): r for r in baseline(args.baseline, args)} if args.baseline else {}

    def row(label: str, r: dict, floor: float, own: float) -> str:
        w, c, seen = r["warm"], r["cold"], r["seen"]
        return (
            f"{label:<10}{r['version']:<6}x{r['scale']:<4}{w['item_ms']:>9.0f}{w['item_ms'] / floor:>8.1f}x"
            f"{w['item_ms'] / own:>8.1f}x{seen['item_ms']:>9.0f}{seen['item_ms'] / floor:>8.1f}x"
            f"{c['index_s']:>10.1f}{w['logging_s']:>10.1f}{w['recall']:>8.3f}{w['correctness']:>7.2f}"
        )

    heads = ("item ms", "/floor", "/own", "seen ms", "/floor", "index s", "log s", "recall", "corr")
    print(
        f"{'code':<10}{'ver':<6}{'KB':<5}"
        + "".join(f"{h:>{w}}" for h, w in zip(heads, (9, 9, 9, 9, 9, 10, 10, 8, 7), strict=True))
    )
    for r in runs:
        key = (r["version"], r["scale"])
        floor, own = r["floor_ms"], r["own_floor_ms"]
        if key in before:
            print(row(f"{args.baseline}"[:10], before[key], floor, own))
        print(row("this", r, floor, own))
        note = f"{'':<21}floor {floor:.0f} ms/item, own-texts floor {own:.0f} ms/item"
        if key in before:
            note += f"; this/baseline per item: {r['warm']['item_ms'] / before[key]['warm']['item_ms']:.2f}"
        print(note)
        if not r.get("identical", True):
            print(f"{'':<21}WARNING: the four evals of {r['version']} x{r['scale']} did not score alike")
    for version in args.versions:
        if len(args.scales) > 1:
            small, big = min(args.scales), max(args.scales)
            ratio = (
                next(r for r in runs if r["version"] == version and r["scale"] == big)["warm"]["item_ms"]
                / next(r for r in runs if r["version"] == version and r["scale"] == small)["warm"]["item_ms"]
            )
            print(f"{version}: per item, KB x{big} costs {ratio:.2f}x KB x{small} (index build excepted)")


if __name__ == "__main__":
    main()
