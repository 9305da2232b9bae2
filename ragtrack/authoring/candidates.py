"""The candidates file: proposed questions waiting for a person, never the golden set itself.

One JSON object per line: the golden item's fields (``id``, ``question``,
``type``, ``gt_context_ids`` — the proposer's suggestion, for the person to
correct — ``gt_answer``, ``tags``) and the review material (``status``,
``suggested_gt``, ``solution_path``, ``draft_answer``, ``source_documents``,
``proposer``, ``note``; from production logs also ``suggested_from``, saying
where each suggested passage came from, and ``provenance``, which the golden
item keeps). A person edits the question and the GT, sets
``status`` to ``accepted`` (or ``rejected``), and ``ragtrack golden accept``
moves the accepted ones into the golden set after validating them against the
corpus. ``gt_answer`` may stay empty: ``ragtrack golden answer`` writes it from
the final GT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragtrack.corpus import Corpus, suggestion
from ragtrack.errors import InputError, Problem, RagtrackError, problems_from_validation
from ragtrack.files import atomic_write_text
from ragtrack.golden import (
    GoldenItem,
    GoldenSet,
    Provenance,
    QuestionType,
    Turn,
    read_models,
    rewrite_golden,
    shape_problems,
    with_fingerprint,
)

Status = Literal["proposed", "accepted", "rejected"]
GOLDEN_FIELDS = ("id", "question", "type", "gt_context_ids", "gt_answer", "tags", "provenance", "history")


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    status: Status = "proposed"
    question: str
    type: QuestionType
    gt_context_ids: tuple[str, ...] = ()
    gt_answer: str = ""
    tags: tuple[str, ...] = ()
    suggested_gt: tuple[str, ...] = ()
    solution_path: str = ""
    draft_answer: str = ""
    source_documents: tuple[str, ...] = ()
    proposer: str = ""
    note: str = ""
    # From production (golden propose --from-logs): where each suggested GT passage came from, and
    # the cluster of messages it was drawn from (kept by the golden item once accepted).
    suggested_from: dict[str, str] = {}
    provenance: Provenance | None = None
    # A follow-up: the conversation's earlier turns, as the golden item will carry them.
    history: tuple[Turn, ...] = ()

    def golden_fields(self) -> dict:
        return {k: getattr(self, k) for k in GOLDEN_FIELDS}

    def to_line(self) -> str:
        data = self.model_dump(mode="json")
        if not data["history"]:  # a question asked alone reads as candidates did before follow-ups
            del data["history"]
        return json.dumps(data, ensure_ascii=False)


def read_candidates(path: Path) -> list[tuple[int, Candidate]]:
    """(line, candidate) for every line; every bad line is a problem naming file, line and field."""
    if not path.is_file():
        return []
    out, problems = read_models(path, Candidate, "candidate")
    if problems:
        raise InputError(problems)
    return out


def write_candidates(path: Path, candidates: list[Candidate]) -> None:
    atomic_write_text(path, "".join(c.to_line() + "\n" for c in candidates))


def next_ids(taken: set[str], types: list[str]) -> list[str]:
    """Fresh IDs ``a001``, ``b001``… for candidates of ``types``, clashing with nothing in ``taken``."""
    out, taken = [], set(taken)
    for t in types:
        n = 1
        while f"{t.lower()}{n:03d}" in taken:
            n += 1
        taken.add(f"{t.lower()}{n:03d}")
        out.append(f"{t.lower()}{n:03d}")
    return out


@dataclass(frozen=True)
class Accepted:
    moved: list[str]  # now in the golden set
    already: list[str]  # were in the golden set already (an interrupted accept): only dropped from the candidates


def accept(
    candidates_path: Path, golden_path: Path, golden: GoldenSet | None, corpus: Corpus, ids: list[str] | None = None
) -> Accepted:
    """Validate the chosen candidates and move them into the golden set (both files rewritten atomically).

    Chosen: ``ids``, or every candidate whose ``status`` is ``accepted``. Any
    problem (a bad field, an unknown GT ID, GT that does not fit the type, an ID
    the golden set already uses for another item) stops the whole command
    before anything is written. The golden set is written first, then the
    candidates file; if a crash falls between the two, running accept again
    finds the items already there and only removes them from the candidates.
    """
    # Lines that do not parse are reported with every other problem, not alone (a fix-one-rerun loop).
    rows, problems = read_models(candidates_path, Candidate, "candidate") if candidates_path.is_file() else ([], [])
    existing = {i.id: i for i in golden.items} if golden else {}
    if not rows:
        if problems:
            raise InputError(problems)
        raise RagtrackError(f"no candidates in {candidates_path}; run `ragtrack golden propose` first")
    by_id = {c.id: (n, c) for n, c in rows}
    if ids:
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            accepted = [i for i in unknown if i in existing]  # accepted before: not a typo
            hint = f" ({', '.join(accepted)} already in the golden set)" if accepted else ""
            raise RagtrackError(f"no candidate {', '.join(unknown)} in {candidates_path}{hint}")
        chosen = [by_id[i] for i in ids]
    else:
        chosen = [(n, c) for n, c in rows if c.status == "accepted"]
        if not chosen and problems:
            raise InputError(problems)
        if not chosen:
            raise RagtrackError(
                f'no candidate in {candidates_path} has "status": "accepted"; mark the ones you reviewed, '
                "or name them with --id"
            )
    new: list[GoldenItem] = []
    already: list[str] = []
    for n, c in chosen:
        where = str(candidates_path)
        try:
            item = GoldenItem.model_validate(c.golden_fields())
        except ValidationError as e:
            problems += problems_from_validation(where, e, n, noun="field", model=GoldenItem)
            continue
        unknown = [cid for cid in item.gt_context_ids if cid not in corpus.passages]
        problems += [
            Problem(where, f"unknown context id {cid!r}{suggestion(cid, list(corpus.passages))}", n, "gt_context_ids")
            for cid in unknown
        ]
        if not unknown:
            problems += [Problem(where, msg, n, "gt_context_ids") for msg in shape_problems(item, corpus)]
        if item.id in existing:
            if existing[item.id].digest_fields() == item.digest_fields():
                already.append(item.id)
            else:
                problems.append(Problem(where, f"the golden set already has an item {item.id!r}; rename it", n, "id"))
            continue
        new.append(with_fingerprint(item, corpus))
    if problems:
        raise InputError(sorted(problems, key=lambda p: p.line or 0))
    rewrite_golden(golden_path, append=new)
    done = {i.id for i in new} | set(already)
    write_candidates(candidates_path, [c for _, c in rows if c.id not in done])
    return Accepted([i.id for i in new], already)
