"""Errors a user can cause, carrying where the bad input is, so the CLI prints them as one line.

Every error a user can fix is a :class:`RagtrackError`: the CLI prints its
message and exits non-zero, never a traceback. Input problems name the file,
line and field (``golden.jsonl:6: type: unknown value 'Q'``).
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel, ValidationError


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


def warning_summary(problems: list[Problem], limit: int = 6) -> list[str]:
    """Warnings as lines for a person: the first ``limit``, then how many more and where to see them."""
    lines = [str(p) for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"… and {len(problems) - limit} more (`ragtrack corpus ls` lists them all)")
    return lines


def corpus_warning_lines(warnings: list[Problem], cache_dir: Path, digest: str) -> tuple[list[str], str]:
    """(warning lines, information line) for a command that loads the corpus: the warnings the first time
    this corpus gives them (:func:`ragtrack.caches.first_showing`), afterwards only a line saying they
    stand — so a project's every eval does not repeat what its first said."""
    from ragtrack.caches import first_showing

    if not warnings:
        return [], ""
    # The file's name, not its path: init and eval reach the same corpus by different paths.
    said = [f"{w.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{w.line}:{w.field}:{w.message}" for w in warnings]
    if first_showing(cache_dir, "\n".join([digest, *said])):
        return warning_summary(warnings), ""
    return [], f"the corpus's {len(warnings)} loading warning(s), shown before, stand (`ragtrack corpus ls` lists them)"


class InputError(RagtrackError):
    """One or more problems in an input file (corpus, golden set, spec, config)."""

    def __init__(self, problems: list[Problem]):
        # In reading order (file, then line; a whole-file problem first), as an editor walks them.
        self.problems = sorted(problems, key=lambda p: (p.file, p.line or 0))
        head = f"{len(problems)} problem(s):" if len(problems) > 1 else ""
        body = "\n".join(f"  {p}" if head else str(p) for p in self.problems)
        super().__init__(f"{head}\n{body}" if head else body)


class ModelUnavailableError(RagtrackError):
    """A model named by a spec cannot be loaded on this machine and has no declared substitute."""


class StoreError(RagtrackError):
    """The tracking store cannot be reached or does not accept what ragtrack asks of it."""


def problems_from_validation(
    file: str,
    error: ValidationError,
    line: int | None = None,
    *,
    noun: str = "key",
    data: object = None,
    model: type[BaseModel] | None = None,
) -> list[Problem]:
    """A pydantic validation error → one :class:`Problem` per failure, in words a user reads.

    ``noun`` is what the format calls its names ("key" in TOML, "field" in JSON).
    Given the validated ``data``, location parts that are not keys of it (the tags
    pydantic adds for a discriminated union) are left out of the field path. Given
    the ``model``, an unknown name is answered with the name it most resembles.
    """
    problems = []
    for err in error.errors():
        loc = _key_path(err["loc"], data)
        kind, ctx = err["type"], err.get("ctx") or {}
        if kind == "extra_forbidden":
            message = f"unknown {noun}{_did_you_mean(err['loc'], model)}"
        elif kind == "missing":
            message = f"required {noun} is missing"
        elif kind == "literal_error":
            message = f"unknown value {err['input']!r}; expected {ctx.get('expected', 'another value')}"
        elif kind == "too_short" and ctx.get("min_length") == 1:
            message = "must list at least one item"
        elif kind in ("list_type", "tuple_type", "set_type"):
            message = f'must be a list, such as ["…"] (got {type(err["input"]).__name__})'
        elif kind == "string_type" and isinstance(err["input"], int | float) and not isinstance(err["input"], bool):
            message = f'must be a string, found the number {err["input"]!r}: write it as "{err["input"]}"'
        else:
            message = err["msg"].removeprefix("Value error, ")
        problems.append(Problem(file, message, line, ".".join(loc) or None))
    return problems


def _key_path(loc: tuple, data: object) -> list[str]:
    path, node = [], data
    for n, part in enumerate(loc):
        if isinstance(node, dict) and part not in node and n < len(loc) - 1:
            continue  # a union tag, not a key the user wrote
        path.append(str(part))
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return path


def _did_you_mean(loc: tuple, model: type[BaseModel] | None) -> str:
    """ " (did you mean 'judge'?)" for a misspelt name, else " (known: …)" for a short list of the
    names that are allowed where it stands; nothing when the model does not say."""
    known = sorted(_names_at(model, loc[:-1])) if model is not None else []
    if not known:
        return ""
    if close := difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6):
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(known)})" if len(known) <= 12 else ""


def _names_at(model: type[BaseModel], loc: tuple) -> set[str]:
    """The field names allowed inside ``loc`` of ``model``: follows nested models, dict values,
    list items and union members (a union tag in ``loc`` keeps the members that declare it)."""
    from pydantic import BaseModel

    current = _members(model)
    for part in loc:
        following = []
        for t in current:
            origin, args = typing.get_origin(t), typing.get_args(t)
            if isinstance(t, type) and issubclass(t, BaseModel):
                if part in t.model_fields:
                    following += _members(t.model_fields[part].annotation)
                elif any(part in _literals(f.annotation) for f in t.model_fields.values()):
                    following.append(t)  # a discriminated union's tag: this member is the one
            elif origin is dict and len(args) == 2:
                following += _members(args[1])
            elif origin in (list, tuple) and args and isinstance(part, int):
                following += _members(args[0])
        current = following
    return {name for t in current if isinstance(t, type) and issubclass(t, BaseModel) for name in t.model_fields}


def _members(annotation: object) -> list:
    """An annotation without its Annotated wrapper, as the list of its union's members."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _literals(annotation: object) -> tuple:
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()
