"""Keeping the golden set honest: validate it, count it, retire what every version aces."""

from __future__ import annotations

import json
from pathlib import Path

from ragtrack.api.evaluation import load_inputs
from ragtrack.config import load_config
from ragtrack.corpus import Corpus
from ragtrack.files import atomic_write_text, read_text
from ragtrack.golden import GoldenSet
from ragtrack.tracking.store import open_store


def validate_golden(
    *, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None
) -> tuple[Corpus, GoldenSet]:
    """The corpus and the golden set, validated against each other (every problem with file, line, field)."""
    return load_inputs(load_config(root), corpus_path, golden_path)


def golden_stats(*, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None) -> dict:
    """Items per type, GT sizes, documents covered."""
    from ragtrack.golden import golden_stats as stats

    corpus, golden = validate_golden(root=root, corpus_path=corpus_path, golden_path=golden_path)
    return stats(golden, corpus)


def retirement_candidates(
    version_names: list[str], *, root: str | Path = ".", golden_path: str | None = None, tracking_uri: str | None = None
) -> list[str]:
    """Items with full marks (correctness 5, context recall 1) in the latest eval of every listed version.

    The golden set is an error notebook: items every recent version gets right
    only dilute the means; they belong in a regression set.
    """
    config = load_config(root)
    _, golden = load_inputs(config, None, golden_path)
    store = open_store(config, tracking_uri)
    perfect: set[str] | None = None
    for name in version_names:
        records = store.records(store.latest_eval(name, golden.digest).run_id)
        full = {
            r.id
            for r in records
            if r.retrieval.get("context_recall") == 1.0
            and r.judges.get("correctness")
            and r.judges["correctness"].score == 5
        }
        perfect = full if perfect is None else perfect & full
    return [i.id for i in golden.items if i.id in (perfect or set())]


def retire(item_ids: list[str], *, root: str | Path = ".", golden_path: str | None = None) -> Path:
    """Move items from the golden set to ``regression.jsonl`` beside it (both rewritten atomically)."""
    config = load_config(root)
    path = Path(golden_path or config.path(config.project.golden))
    regression = path.with_name("regression.jsonl")
    keep, move = [], []
    for line in read_text(path).splitlines():
        if line.strip():
            (move if json.loads(line).get("id") in set(item_ids) else keep).append(line)
    previous = read_text(regression).splitlines() if regression.is_file() else []
    atomic_write_text(regression, "\n".join(previous + move) + "\n")
    atomic_write_text(path, "\n".join(keep) + "\n")
    return regression
