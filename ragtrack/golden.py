"""The golden set: a small, hand-checked "error notebook" of questions.

Each item names the minimal sufficient set of canonical passages that answers
it (``gt_context_ids``) and a reference answer. Items are typed by retrieval
scenario:

* A single-hop, single point (one passage: a value, a definition);
* B single-hop, scattered (one document, several places);
* C cross-topic / cross-document comparison or synthesis;
* D multi-hop (a clue in one passage leads to another).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragtrack.corpus import Corpus
from ragtrack.errors import InputError, Problem, problems_from_validation
from ragtrack.files import read_jsonl
from ragtrack.text import language_of

QuestionType = Literal["A", "B", "C", "D"]
TYPES: tuple[str, ...] = ("A", "B", "C", "D")


class GoldenItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    question: str
    type: QuestionType
    gt_context_ids: tuple[str, ...] = Field(min_length=1)
    gt_answer: str
    tags: tuple[str, ...] = ()

    @field_validator("question", "gt_answer")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("gt_context_ids")
    @classmethod
    def _unique_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = [k for k, n in Counter(v).items() if n > 1]
        if dupes:
            raise ValueError(f"listed twice: {', '.join(dupes)}")
        return v


@dataclass(frozen=True)
class GoldenSet:
    source: str
    items: tuple[GoldenItem, ...]
    corpus_digest: str

    def __len__(self) -> int:
        return len(self.items)

    @property
    def digest(self) -> str:
        """Content hash of the items and of the corpus they are scored against.

        Two eval runs are comparable only when this digest matches: the same
        questions, the same GT and the same passages behind the GT IDs.
        """
        h = hashlib.sha256(self.corpus_digest.encode())
        for item in sorted(self.items, key=lambda i: i.id):
            h.update(json.dumps(item.model_dump(), sort_keys=True, ensure_ascii=False).encode())
        return h.hexdigest()[:16]

    @property
    def language(self) -> str:
        """``zh`` or ``en``, judged on the questions: picks the judges' prompt language."""
        return language_of("".join(i.question for i in self.items))

    def limit(self, n: int | None) -> GoldenSet:
        """The first ``n`` items (same digest rules apply: a subset is a different set)."""
        return self if n is None else GoldenSet(self.source, self.items[:n], self.corpus_digest)


def load_golden(path: str | Path, corpus: Corpus) -> GoldenSet:
    """Load and validate a golden JSONL file against ``corpus``.

    Every problem is reported, each naming the file, line and field.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError([Problem(str(path), "golden set not found")])
    lines, problems = read_jsonl(path)
    items: list[GoldenItem] = []
    first_line: dict[str, int] = {}
    for n, row in lines:
        try:
            item = GoldenItem.model_validate(row)
        except ValidationError as e:
            problems += problems_from_validation(str(path), e, n, noun="field")
            continue
        if item.id in first_line:
            problems.append(
                Problem(str(path), f"duplicate item id {item.id!r} (first on line {first_line[item.id]})", n, "id")
            )
            continue
        first_line[item.id] = n
        unknown = [cid for cid in item.gt_context_ids if cid not in corpus.passages]
        for cid in unknown:
            problems.append(Problem(str(path), f"unknown context id {cid!r}", n, "gt_context_ids"))
        if not unknown:
            items.append(item)
    if problems:
        raise InputError(problems)
    if not items:
        raise InputError([Problem(str(path), "the golden set has no items")])
    return GoldenSet(source=str(path), items=tuple(items), corpus_digest=corpus.digest)


def golden_stats(golden: GoldenSet, corpus: Corpus) -> dict:
    """Counts a maintainer looks at: items per type, GT sizes, documents touched."""
    by_type = Counter(i.type for i in golden.items)
    gt_sizes = [len(i.gt_context_ids) for i in golden.items]
    docs = {corpus.passages[c].doc_id for i in golden.items for c in i.gt_context_ids}
    return {
        "items": len(golden),
        "by_type": {t: by_type.get(t, 0) for t in TYPES},
        "mean_gt_contexts": sum(gt_sizes) / len(gt_sizes),
        "max_gt_contexts": max(gt_sizes),
        "documents_with_gt": len(docs),
        "documents_in_corpus": len(corpus.documents),
        "passages_in_corpus": len(corpus),
        "digest": golden.digest,
    }
