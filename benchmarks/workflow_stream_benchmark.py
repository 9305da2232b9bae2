"""What keeping every node costs: a Dify workflow asked streaming (events read into nodes) vs blocking.

Both modes ask the loopback workflow app (rewrite → question classifier → one knowledge base per class
→ LLM) over real HTTP on 127.0.0.1 the same questions; the server does the same work either way, so the
difference is the capture: the larger event stream, its parsing and reading every node's outputs.
Each LLM node takes ``--llm-latency`` seconds (0.05 by default; a hosted model takes 0.5-5 s, so the
default flatters blocking). Rounds alternate the two modes; the figures are the median of the per-round
ratios (streaming ÷ blocking) and the capture's cost in milliseconds a question:

    python benchmarks/workflow_stream_benchmark.py [--rounds 7] [--questions 40] [--llm-latency 0.05]

The issue's bound is ≤ 1.05 (streaming capture costs at most 5 % wall time over blocking).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ragtrack.agents.endpoint import bearer_endpoint
from ragtrack.agents.workflow import node_contexts, output_text, read_events, result_contexts
from ragtrack.llm.accounting import Usage
from ragtrack.testing.dify_server import DifyServer

KB = Path(__file__).resolve().parent.parent / "golden" / "kb"
QUESTIONS = [
    "What is the default cfg value?",
    "How many steps does the sampler use by default?",
    "Where do checkpoint files go?",
    "What does the negative prompt do?",
    "Which text encoders are supported?",
]


def ask_all(endpoint, questions: list[str], streaming: bool) -> float:
    """Seconds to ask every question and read its answer and contexts (and, streaming, its nodes)."""
    start = time.perf_counter()
    for q in questions:
        body = {"inputs": {"query": q}, "user": "bench", "response_mode": "streaming" if streaming else "blocking"}
        if streaming:
            run = read_events(
                endpoint.request("POST", "/workflows/run", json_body=body, usage=Usage(), step="b", events=True)
            )
            output_text(run.outputs, "answer")
            node_contexts(run.nodes)
        else:
            outputs = endpoint.request("POST", "/workflows/run", json_body=body, usage=Usage(), step="b")["data"][
                "outputs"
            ]
            output_text(outputs, "answer")
            result_contexts(outputs["contexts"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument(
        "--llm-latency", type=float, default=0.05, help="seconds each LLM node takes (a hosted model: 0.5-5)"
    )
    a = parser.parse_args()
    questions = (QUESTIONS * a.questions)[: a.questions]
    with DifyServer(KB, app_mode="workflow", app_key="app-bench") as server:
        server.workflow.llm_latency_s = a.llm_latency
        endpoint = bearer_endpoint(
            server.base_url, "app-bench", timeout_s=30, max_concurrency=1, check=lambda s, b: None
        )
        ask_all(endpoint, questions[:5], True)  # warm: connections, the knowledge base's first searches
        ratios, walls = [], {True: [], False: []}
        for n in range(a.rounds):
            order = (True, False) if n % 2 else (False, True)
            seconds = {mode: ask_all(endpoint, questions, mode) for mode in order}
            walls[True].append(seconds[True])
            walls[False].append(seconds[False])
            ratios.append(seconds[True] / seconds[False])
    extra_ms = (statistics.median(walls[True]) - statistics.median(walls[False])) / a.questions * 1000
    print(f"{a.questions} questions × {a.rounds} rounds, one at a time, {a.llm_latency:g} s per LLM node (3 a run)")
    print(f"  blocking   median {statistics.median(walls[False]):.3f} s")
    print(f"  streaming  median {statistics.median(walls[True]):.3f} s (every node kept)")
    rounds = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"  streaming ÷ blocking: median {statistics.median(ratios):.3f} (rounds: {rounds})")
    print(f"  capture cost: {extra_ms:+.2f} ms a question")


if __name__ == "__main__":
    main()
