"""TOML input files (``ragtrack.toml``, ``pipelines/*.toml``): every problem points at its line.

``tomllib`` returns plain dicts without positions, and pydantic reports a key
path (``eval.timeout_s``), not where the user wrote it. :func:`key_line` maps a
key path back to the line that sets it — or, for a missing key, the line of the
table that lacks it — so an error reads ``ragtrack.toml:5: eval.timeout_s: …``
and an editor jumps there.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ragtrack.errors import InputError, Problem, problems_from_validation
from ragtrack.files import read_text

M = TypeVar("M", bound=BaseModel)

# One part of a dotted key: bare, "basic" or 'literal'.
_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"\s*(\[\[?)\s*({_KEY})\s*\]\]?")
_ASSIGN = re.compile(rf"\s*({_KEY})\s*=")
_DECODE_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
# A model validator that checks keys against each other names the key path it blames first.
_BLAMED = re.compile(r"^([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+): (.*)$", re.S)


def _parts(key: str) -> tuple[str, ...]:
    return tuple(p.strip('"').strip("'") for p in re.findall(_PART, key))


def key_lines(text: str) -> dict[tuple, int]:
    """Every key path the text sets or opens, with the (first) line that does it.

    Tables of an array (``[[pipelines]]``) are numbered as pydantic numbers list items.
    Lines inside multi-line strings are skipped; keys inside inline tables map to the
    line of the key that holds the table (the fallback of :func:`key_line`).
    """
    lines: dict[tuple, int] = {}
    table: tuple = ()
    counts: dict[tuple, int] = {}
    quote: str | None = None  # the delimiter of an open multi-line string
    for number, line in enumerate(text.splitlines(), 1):
        if quote is not None:
            if line.count(quote) % 2:
                quote = None
            continue
        if (header := _HEADER.match(line)) is not None:
            table = _parts(header.group(2))
            if header.group(1) == "[[":
                counts[table] = counts.get(table, -1) + 1
                table = (*table, counts[table])
            for n in range(1, len(table) + 1):
                lines.setdefault(table[:n], number)
        elif (assign := _ASSIGN.match(line)) is not None:
            path = (*table, *_parts(assign.group(1)))
            for n in range(len(table) + 1, len(path) + 1):
                lines.setdefault(path[:n], number)
        for delimiter in ('"""', "'''"):
            if line.count(delimiter) % 2:
                quote = delimiter
    return lines


def key_line(text: str, path: Sequence[str | int]) -> int | None:
    """The line of ``path`` in ``text``, else of its nearest enclosing key or table; None if
    none of it is written (a missing top-level key)."""
    return _nearest(key_lines(text), path)


def file_key_line(path: str | Path, key: Sequence[str | int]) -> int | None:
    """:func:`key_line` of a file on disk; None when it cannot be read (the message still names the file)."""
    try:
        return key_line(Path(path).read_text(encoding="utf-8"), key)
    except (OSError, UnicodeDecodeError):
        return None


def _nearest(lines: dict[tuple, int], path: Sequence[str | int]) -> int | None:
    return next((lines[tuple(path[:n])] for n in range(len(path), 0, -1) if tuple(path[:n]) in lines), None)


def locate(problems: list[Problem], text: str) -> list[Problem]:
    """``problems`` of one TOML file, each given the line of the key it names."""
    lines = key_lines(text)
    located = []
    for p in problems:
        if p.field is None and (blamed := _BLAMED.match(p.message)) is not None:
            p = replace(p, field=blamed.group(1), message=blamed.group(2))
        if p.line is None and p.field is not None:
            p = replace(p, line=_nearest(lines, p.field.split(".")))
        located.append(p)
    return located


def parse(path: Path, text: str) -> dict:
    """``text`` (read from ``path``) as TOML; a syntax error names its line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message, line = str(e), None
        if (at := _DECODE_AT.search(message)) is not None:
            message, line = f"{message[: at.start()]} (column {at.group(2)})", int(at.group(1))
        raise InputError([Problem(str(path), f"bad TOML: {message}", line)]) from None


def load(path: Path) -> tuple[dict, str]:
    """Read and parse one TOML file: (its data, its text for :func:`locate`)."""
    text = read_text(path)
    return parse(path, text), text


def validate(model: type[M], data: dict, path: Path, text: str, **context: object) -> M:
    """``model`` from ``data`` (parsed from ``text``); every failure is a :class:`Problem`
    at the line of the key it concerns. ``context`` adds fields that are not in the file."""
    if clashes := [key for key in context if key in data]:  # not the file's to set
        raise InputError(locate([Problem(str(path), "unknown key", field=key) for key in clashes], text))
    try:
        return model.model_validate({**data, **context})
    except ValidationError as e:
        problems = problems_from_validation(str(path), e, data=data, model=model)
        raise InputError(locate(problems, text)) from None
