"""Reading README.md from tests: its runnable walkthroughs and its measured tables.

A walkthrough is the shell block under ``<!-- walkthrough: name -->``; a measured table is the
Markdown table under ``<!-- figures: name -->``. Tests run the one and check the other, so the
README cannot drift from what the code does.
"""

from __future__ import annotations

import re
from pathlib import Path

from ragtrack.evaluation.metrics import ALL, TYPES, key

README = Path(__file__).resolve().parent.parent / "README.md"


def walkthrough(name: str) -> str:
    """The shell block under ``<!-- walkthrough: name -->``."""
    match = re.search(rf"<!-- walkthrough: {re.escape(name)} -->\n```sh\n(.*?)```", _text(), re.DOTALL)
    assert match, f"README.md has no walkthrough block {name!r}"
    return match.group(1)


def figures(name: str) -> dict[str, dict[str, str]]:
    """The table under ``<!-- figures: name -->``: first cell of each row → {column header: cell}."""
    match = re.search(rf"<!-- figures: {re.escape(name)} -->\n((?:\|.*\|\n)+)", _text())
    assert match, f"README.md has no measured table {name!r}"
    header, _rule, *rows = (
        [cell.strip() for cell in line.strip().strip("|").split("|")] for line in match.group(1).splitlines()
    )
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


# A measured table's column header → the run metric it shows; "recall A" is recall on type A items.
COLUMNS = {
    "recall": "context_recall",
    "precision": "context_precision",
    "MRR": "mrr",
    "hit rate": "hit_rate",
    "nDCG": "ndcg_at_k",
    "correctness": "correctness",
    "groundedness": "groundedness",
    "relevance": "relevance",
    "organization": "organization",
}


def printed(row: dict[str, str], metrics: dict[str, float]) -> dict[str, str]:
    """``row`` of a measured table as a run's ``metrics`` fill it, each to the decimals its cell
    shows (the label, the first cell, kept)."""
    label, *columns = row
    out = {label: row[label]}
    for column in columns:
        name, _, scope = column.rpartition(" ")
        if scope not in TYPES:
            name, scope = column, ALL
        decimals = len(row[column].partition(".")[2])
        out[column] = f"{metrics[key(COLUMNS[name], scope)]:.{decimals}f}"
    return out


def _text() -> str:
    return README.read_text(encoding="utf-8")
