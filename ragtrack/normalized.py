"""Public benchmarks in the normalized format → a ragtrack corpus and golden set.

A normalized benchmark folder holds ``corpus.jsonl`` (``{"id", "title", "text"}``
per passage) and ``queries.jsonl`` (``{"id", "question", "answers", "gt_ids",
"gt_groups", "type"}``): ``gt_ids`` are every relevant passage, ``gt_groups`` an
AND of ORs (one group per hop or sub-question). Each query becomes a golden
item: its type mapped to ragtrack's (multi-hop bridge questions → D,
comparisons and multi-evidence synthesis → C, single facts and reading-
comprehension spans → A), ``gt_context_ids`` = ``gt_ids``, the groups kept for
the all-hops metric, the answers joined as the GT answer, the source type kept
as a tag, and each item fingerprinted against the imported corpus.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ragtrack.corpus import Passage, load_corpus
from ragtrack.errors import InputError, Problem, problems_from_validation
from ragtrack.files import atomic_write_text, read_jsonl
from ragtrack.golden import GoldenItem, with_fingerprint
from ragtrack.registry import UnknownNameError

#: A benchmark's question kind (the part before any ``/difficulty``) → ragtrack's type.
QUERY_TYPES: dict[str, str] = {
    "bridge": "D",
    "multi-hop": "D",
    "comparison": "C",
    "information_integration": "C",
    "single_fact": "A",
    "span": "A",
}
FORMATS = ("normalized",)


@dataclass(frozen=True)
class Imported:
    corpus_path: Path
    golden_path: Path
    passages: int
    items: int
    by_type: dict[str, int]
    with_groups: int


def golden_type(raw: str) -> str:
    """``bridge/medium`` → ``D``; an unknown kind is an error listing the known ones."""
    kind = raw.split("/", 1)[0].strip().lower()
    if kind not in QUERY_TYPES:
        raise UnknownNameError(
            f"unknown benchmark question type {raw!r}; expected one of: {', '.join(QUERY_TYPES)} (or kind/level)"
        )
    return QUERY_TYPES[kind]


def import_normalized(folder: str | Path, out: str | Path, limit: int | None = None) -> Imported:
    """Write ``out/corpus.jsonl`` and ``out/golden.jsonl`` from a normalized benchmark folder.

    Both inputs are validated first (every problem with file, line and field);
    nothing is written unless all of them load. ``limit`` keeps the first N
    questions (the corpus is kept whole: its other passages are the distractors).
    """
    folder, out = Path(folder), Path(out)
    corpus_in, queries_in = folder / "corpus.jsonl", folder / "queries.jsonl"
    for f in (corpus_in, queries_in):
        if not f.is_file():
            raise InputError([Problem(str(f), "not found (a normalized benchmark holds corpus.jsonl, queries.jsonl)")])
    corpus = load_corpus(corpus_in)  # validates IDs and texts
    rows, problems = read_jsonl(queries_in)
    items: list[GoldenItem] = []
    for n, row in rows[:limit] if limit else rows:
        answers = row.get("answers") or []
        answers = [answers] if isinstance(answers, str) else answers
        try:
            kind = golden_type(str(row.get("type", "")))
            groups = [g for g in row.get("gt_groups") or [] if g]
            item = GoldenItem.model_validate(
                {
                    "id": str(row.get("id", "")),
                    "question": row.get("question", ""),
                    "type": kind,
                    "gt_context_ids": row.get("gt_ids") or [],
                    "gt_answer": " / ".join(str(a).strip() for a in answers if str(a).strip()),
                    "tags": [str(row["type"])] if row.get("type") else [],
                    # A lone one-passage group says nothing gt_ids does not; a lone group of several is
                    # "any one of these answers it" (RGB's positives), two or more are the hops.
                    "gt_groups": groups if len(groups) > 1 or any(len(g) > 1 for g in groups) else [],
                }
            )
        except ValidationError as e:
            problems += problems_from_validation(str(queries_in), e, n, noun="field")
            continue
        except UnknownNameError as e:
            problems.append(Problem(str(queries_in), str(e), n, "type"))
            continue
        missing = [cid for cid in item.gt_context_ids if cid not in corpus.passages]
        problems += [Problem(str(queries_in), f"unknown passage id {cid!r}", n, "gt_ids") for cid in missing]
        if not item.answered:
            problems.append(Problem(str(queries_in), "no answer", n, "answers"))
        if not missing:
            items.append(with_fingerprint(item, corpus))
    if problems:
        raise InputError(problems)
    corpus_out, golden_out = out / "corpus.jsonl", out / "golden.jsonl"
    atomic_write_text(corpus_out, "".join(_passage_line(p) + "\n" for p in corpus.passages.values()))
    atomic_write_text(golden_out, "".join(i.to_line() + "\n" for i in items))
    return Imported(
        corpus_out,
        golden_out,
        len(corpus),
        len(items),
        dict(sorted(Counter(i.type for i in items).items())),
        sum(1 for i in items if i.gt_groups),
    )


def _passage_line(p: Passage) -> str:
    row = {"id": p.id, "title": p.title, "text": p.text}
    if p.doc_id != p.id:
        row["doc_id"] = p.doc_id
    return json.dumps(row, ensure_ascii=False)
