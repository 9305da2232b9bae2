"""ragtrack: prove that version N+1 of your RAG agent is better than version N.

The public verbs (each also a CLI command)::

    import ragtrack
    report = ragtrack.evaluate("v5")          # answer + score the golden set, log an MLflow run
    ragtrack.compare("v1", "v5")              # paired differences per metric and question type
    ragtrack.promote("v5")                    # move the 'champion' alias if v5 wins
    ragtrack.versions()                       # registered versions, last scores, champion
    ragtrack.calibrate("openai:gpt-4o-mini")  # judge agreement with human labels

They are imported on first use, so ``import ragtrack`` stays cheap.
"""

from __future__ import annotations

import importlib

__all__ = ["calibrate", "compare", "evaluate", "promote", "retire", "retirement_candidates", "versions"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("ragtrack.api"), name)
    raise AttributeError(f"module 'ragtrack' has no attribute {name!r}")
