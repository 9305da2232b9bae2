"""Reading README.md and the docs site from tests: runnable walkthroughs and measured tables.

A walkthrough is the shell block under ``<!-- walkthrough: name -->``; a measured table is the
Markdown table under ``<!-- figures: name -->``. Either may sit in README.md or in any page under
``docs/``; a name is unique across them. Tests run the one and check the other, so the docs cannot
drift from what the code does.
"""

from __future__ import annotations

import re
from pathlib import Path

from ragtrack.evaluation.metrics import ALL, TYPES, key

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def markers(kind: str) -> dict[str, Path]:
    """Every ``<!-- kind: name -->`` marker's name → the page it is on (a name used twice fails)."""
    found: dict[str, Path] = {}
    for page in pages():
        for name in re.findall(rf"<!-- {kind}: (.+?) -->", page.read_text(encoding="utf-8")):
            assert name not in found, f"{kind} {name!r} is marked on {found[name].name} and {page.name}"
            found[name] = page
    return found


def walkthrough(name: str) -> str:
    """The shell block under ``<!-- walkthrough: name -->``."""
    text = _text("walkthrough", name)
    match = re.search(rf"<!-- walkthrough: {re.escape(name)} -->\n```sh\n(.*?)```", text, re.DOTALL)
    assert match, f"the walkthrough marker {name!r} is not followed by a ```sh block"
    return match.group(1)


def figures(name: str) -> dict[str, dict[str, str]]:
    """The table under ``<!-- figures: name -->``: first cell of each row → {column header: cell}."""
    match = re.search(rf"<!-- figures: {re.escape(name)} -->\n((?:\|.*\|\n)+)", _text("figures", name))
    assert match, f"the figures marker {name!r} is not followed by a table"
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


def _text(kind: str, name: str) -> str:
    page = markers(kind).get(name)
    assert page, f"no page under README.md or docs/ marks {kind} {name!r}"
    return page.read_text(encoding="utf-8")
