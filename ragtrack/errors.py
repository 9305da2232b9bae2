"""Errors that carry where the bad input is, so the CLI can print them as-is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class RagtrackError(Exception):
    """Base class: a problem the user can fix; the CLI prints it without a traceback."""


@dataclass(frozen=True)
class Problem:
    """One problem in an input file: ``file:line: field: message``."""

    file: str
    message: str
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class InputError(RagtrackError):
    """One or more problems in an input file (corpus, golden set, spec, config)."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        head = f"{len(problems)} problem(s):" if len(problems) > 1 else ""
        body = "\n".join(f"  {p}" if head else str(p) for p in problems)
        super().__init__(f"{head}\n{body}" if head else body)


class ModelUnavailableError(RagtrackError):
    """A model named by a spec cannot be loaded on this machine and has no declared substitute."""


def read_jsonl(path: Path, text: str | None = None) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """Non-blank lines of a JSONL file as (line number, object); bad lines become problems."""
    rows: list[tuple[int, dict]] = []
    problems: list[Problem] = []
    text = path.read_text(encoding="utf-8") if text is None else text
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append(Problem(str(path), f"bad JSON: {e.msg} (column {e.colno})", n))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(str(path), "each line must be a JSON object", n))
            continue
        rows.append((n, row))
    return rows, problems
