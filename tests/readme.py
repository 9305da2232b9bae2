"""Reading README.md and the docs site from tests: runnable walkthroughs and measured tables.

A walkthrough is the shell block under ``<!-- walkthrough: name -->``; what it prints, the text
block under ``<!-- output: name -->``; a measured table, the Markdown table under
``<!-- figures: name -->``. Each may sit in README.md or in any page under ``docs/``; a name is
unique across them. Tests run the walkthroughs and check the rest, so the docs cannot drift from
what the code does.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

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
        for name in re.findall(rf"^<!-- {kind}: (.+?) -->$", page.read_text(encoding="utf-8"), re.MULTILINE):
            assert name not in found, f"{kind} {name!r} is marked on {found[name].name} and {page.name}"
            found[name] = page
    return found


def walkthrough(name: str) -> str:
    """The shell block under ``<!-- walkthrough: name -->``."""
    text = _text("walkthrough", name)
    match = re.search(rf"<!-- walkthrough: {re.escape(name)} -->\n```sh\n(.*?)```", text, re.DOTALL)
    assert match, f"the walkthrough marker {name!r} is not followed by a ```sh block"
    return match.group(1)


def output(name: str) -> list[str]:
    """The lines of the text block under ``<!-- output: name -->`` (a ```text fence or indented lines)."""
    text = _text("output", name)
    fenced = re.search(rf"<!-- output: {re.escape(name)} -->\n```text\n(.*?)```", text, re.DOTALL)
    if fenced:
        return fenced.group(1).splitlines()
    indented = re.search(rf"<!-- output: {re.escape(name)} -->\n((?:    .*\n)+)", text)
    assert indented, f"the output marker {name!r} is not followed by a ```text block or indented lines"
    return [line[4:] for line in indented.group(1).splitlines()]


@contextmanager
def stand_in(name: str) -> Iterator[tuple[object, int]]:
    """The loopback server that the walkthrough ``name`` starts in its own terminal (``python -m
    ragtrack.testing.MODULE ARGS``), started in this process on a free port instead of the one written,
    so a test can check its replies; yields the server and that port."""
    command = shlex.split(walkthrough(name).replace("\\\n", " "), comments=True)
    assert command[:2] == ["python", "-m"] and command[2].startswith("ragtrack.testing."), command
    argv = command[3:]
    argv[argv.index("--port") + 1] = "0"
    with importlib.import_module(command[2]).from_args(argv) as server:
        yield server, urlsplit(server.base_url).port


def shell_env() -> dict[str, str]:
    """The environment a docs shell block runs in (and the pre-imported ``ragtrack`` is started in): this
    checkout first, no tracking URI inherited from the test's environment, and wide enough that no table
    the docs show is wrapped."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(PATH=f"{Path(sys.executable).parent}:{env['PATH']}", PYTHONPATH=str(ROOT), COLUMNS="160")
    return env


def run_shell(script: str, cwd: Path, tmp_path: Path, prefork: Path | None = None) -> subprocess.CompletedProcess:
    """A shell block of the docs in a fresh shell, `ragtrack` being this checkout's CLI however the
    package was installed: ``python -m ragtrack.cli``, or with ``prefork`` (the socket of a
    ``ragtrack.testing.prefork`` server) each line's own process forked from a pre-imported one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if prefork:
        client = ROOT / "ragtrack" / "testing" / "prefork.py"
        command = f'exec "{sys.executable}" -I -S "{client}" --client "{prefork}" "$@"'
    else:
        command = f'exec "{sys.executable}" -m ragtrack.cli "$@"'
    (bin_dir / "ragtrack").write_text(f"#!/bin/sh\n{command}\n")
    (bin_dir / "ragtrack").chmod(0o755)
    env = shell_env()
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


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
    "precision@k": "precision_at_k",
    "distinct precision": "context_precision",
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
