"""RAGAS side of llm_benchmark.py, run by a Python that has ragas installed (not ragtrack's venv).

RAGAS 0.4 needs langchain < 1, which conflicts with ragtrack's dependencies, so
the benchmark runs this file in a separate virtualenv:

    python3.11 -m venv /tmp/ragasenv
    /tmp/ragasenv/bin/pip install ragas "langchain-community<0.4" "langchain<1" "langchain-openai<1"
    python benchmarks/llm_benchmark.py --ragas-python /tmp/ragasenv/bin/python

Reads OPENAI_BASE_URL / OPENAI_API_KEY, scores ``--items`` synthetic items with
four LLM-only RAGAS metrics (RAGAS's default run config: 16 workers) and prints
one JSON line: wall seconds, and how many scores came back NaN.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=40)
    args = parser.parse_args()

    from langchain_openai import ChatOpenAI
    from ragas import EvaluationDataset, evaluate
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import AspectCritic, FactualCorrectness, Faithfulness, LLMContextRecall

    llm = LangchainLLMWrapper(
        ChatOpenAI(
            model="bench",
            base_url=os.environ["OPENAI_BASE_URL"],
            api_key=os.environ["OPENAI_API_KEY"],
            temperature=0,
            max_tokens=256,
        )
    )
    rows = [
        {
            "user_input": f"What does setting {i} do?",
            "response": f"Setting {i} controls step {i}.",
            "reference": f"It controls step {i}.",
            "retrieved_contexts": [f"Setting {i} controls step {i} of the sampler."],
        }
        for i in range(args.items)
    ]
    metrics = [
        Faithfulness(),
        FactualCorrectness(),
        LLMContextRecall(),
        AspectCritic(name="organization", definition="Is the answer well organised?"),
    ]
    started = time.monotonic()
    result = evaluate(EvaluationDataset.from_list(rows), metrics=metrics, llm=llm, show_progress=False)
    wall = time.monotonic() - started
    frame = result.to_pandas()
    scores = frame[[c for c in frame.columns if c not in rows[0]]].to_numpy().ravel().tolist()
    nan = sum(1 for s in scores if s is None or (isinstance(s, float) and math.isnan(s)))
    print(json.dumps({"wall": wall, "scores": len(scores), "nan": nan}))


if __name__ == "__main__":
    main()
