"""The golden set: a small, hand-checked "error notebook" of questions.

Each item names the minimal sufficient set of canonical passages that answers
it (``gt_context_ids``) and a reference answer. Items are typed by retrieval
scenario:

* A single-hop, single point (one passage: a value, a definition);
* B single-hop, scattered (one document, several places);
* C cross-topic / cross-document comparison or synthesis;
* D multi-hop (a clue in one passage leads to another).

Each item may record a fingerprint of its GT passages' text, taken when it was
written, accepted or answered. When the corpus is edited or re-imported, the
fingerprint tells which items' GT no longer says what their answer was built
from (:func:`staleness`), so a metric is never computed against moved GT by
accident. Items imported from multi-hop benchmarks may carry ``gt_groups``
(one OR-group of passage IDs per hop) for the all-hops metric.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragtrack.corpus import Corpus, suggestion
from ragtrack.errors import InputError, Problem, RagtrackError, problems_from_validation
from ragtrack.files import atomic_write_text, read_jsonl, read_text
from ragtrack.text import language_of

QuestionType = Literal["A", "B", "C", "D"]
TYPES: tuple[str, ...] = ("A", "B", "C", "D")


class Provenance(BaseModel):
    """Where an item came from when it was not written from the documents: production traffic
    (``ragtrack golden propose --from-logs``). Kept with the item; not part of the digest (it changes
    no score)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["production"] = "production"
    messages: tuple[str, ...]  # the platform's message IDs of the cluster
    apps: tuple[str, ...] = ()
    users: int = 0  # distinct end users who asked
    dislikes: int = 0
    first_seen: str = ""  # ISO 8601, when the first of the messages was answered
    last_seen: str = ""
    proposed: str = ""  # the date it was proposed (YYYY-MM-DD)
    bad_answer: str = ""  # what the app answered, which users disliked
    complaints: tuple[str, ...] = ()  # what they wrote


class Turn(BaseModel):
    """One earlier turn of a conversation: what the user asked, or what the assistant answered then."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant"]
    content: str

    @field_validator("content")
    @classmethod
    def _said_something(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v


class GoldenItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    question: str
    type: QuestionType
    gt_context_ids: tuple[str, ...] = Field(min_length=1)
    # Empty while the item waits for ``ragtrack golden answer``; eval refuses such items.
    gt_answer: str
    tags: tuple[str, ...] = ()
    # Multi-hop benchmarks: one OR-group of GT passages per hop (all-hops@k needs one of each).
    gt_groups: tuple[tuple[str, ...], ...] = ()
    # GT passage ID → fingerprint of its text when the item was written (see :func:`staleness`).
    gt_fingerprint: dict[str, str] = Field(default_factory=dict)
    provenance: Provenance | None = None
    # A follow-up question: the conversation's earlier turns, oldest first. The item's metrics are
    # those of its last turn, ``question``; the agent is handed the turns its platform expects.
    history: tuple[Turn, ...] = ()
    # Expectations per node (optional): the class an intent node should route the item to, and the
    # terms a rewrite node must keep (see ragtrack.evaluation.nodes).
    intent: str = ""
    must_keep: tuple[str, ...] = ()

    @field_validator("intent")
    @classmethod
    def _intent_not_blank(cls, v: str) -> str:
        if v and not v.strip():
            raise ValueError("blank; name the class the item should be routed to, or leave the field out")
        return v.strip()

    @field_validator("must_keep")
    @classmethod
    def _terms(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not t.strip() for t in v):
            raise ValueError("a blank term; list the words a rewrite of the question must keep")
        if dupes := [t for t, n in Counter(v).items() if n > 1]:
            raise ValueError(f"listed twice: {', '.join(dupes)}")
        return tuple(t.strip() for t in v)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("gt_answer")
    @classmethod
    def _answer_or_pending(cls, v: str) -> str:
        if v and not v.strip():
            raise ValueError('blank; write the answer, or "" to leave it to `ragtrack golden answer`')
        return v

    @field_validator("gt_context_ids")
    @classmethod
    def _unique_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = [k for k, n in Counter(v).items() if n > 1]
        if dupes:
            raise ValueError(f"listed twice: {', '.join(dupes)}")
        return v

    @field_validator("history")
    @classmethod
    def _history_has_a_user_turn(cls, v: tuple[Turn, ...]) -> tuple[Turn, ...]:
        if v and not any(t.role == "user" for t in v):
            raise ValueError("holds no user turn: a follow-up follows something the user asked")
        return v

    @model_validator(mode="after")
    def _groups_within_gt(self) -> GoldenItem:
        for n, group in enumerate(self.gt_groups, start=1):
            if not group:
                raise ValueError(f"gt_groups: group {n} is empty")
            outside = [cid for cid in group if cid not in self.gt_context_ids]
            if outside:
                raise ValueError(f"gt_groups: group {n} names {', '.join(outside)}, which gt_context_ids does not list")
        return self

    def digest_fields(self) -> dict:
        """What the golden digest covers: everything that changes a score.

        The fingerprint is left out: it records what the GT passages said when the
        item was written, and the digest already covers the corpus as it is now, so
        two sets that differ only in recorded fingerprints measure the same thing.
        Empty ``gt_groups`` and ``history`` (and unset node expectations) are left out too, so sets written
        before they existed keep their digest, and so is the provenance (where an item came from scores nothing).
        """
        unset = [k for k in ("gt_groups", "history", "intent", "must_keep") if not getattr(self, k)]
        return self.model_dump(mode="json", exclude={"gt_fingerprint", "provenance", *unset})

    def to_line(self) -> str:
        """The item as one JSONL line, optional fields only when set (the form ragtrack writes)."""
        data = self.model_dump(mode="json")
        for optional in ("tags", "gt_groups", "gt_fingerprint", "provenance", "history", "intent", "must_keep"):
            if not data[optional]:
                del data[optional]
        return json.dumps(data, ensure_ascii=False)

    @property
    def answered(self) -> bool:
        return bool(self.gt_answer.strip())


@dataclass(frozen=True)
class GoldenSet:
    source: str
    items: tuple[GoldenItem, ...]
    corpus_digest: str
    lines: dict[str, int] = field(default_factory=dict, compare=False)  # item ID → line in the file

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
            h.update(json.dumps(item.digest_fields(), sort_keys=True, ensure_ascii=False).encode())
        return h.hexdigest()[:16]

    @property
    def language(self) -> str:
        """``zh`` or ``en``, judged on the questions: picks the judges' prompt language."""
        return language_of("".join(i.question for i in self.items))

    def limit(self, n: int | None) -> GoldenSet:
        """The first ``n`` items (same digest rules apply: a subset is a different set)."""
        return self if n is None else GoldenSet(self.source, self.items[:n], self.corpus_digest, self.lines)

    def where(self, item_id: str) -> str:
        """``file:line`` of an item, for messages."""
        return f"{self.source}:{self.lines[item_id]}" if item_id in self.lines else self.source


def shape_problems(item: GoldenItem, corpus: Corpus) -> list[str]:
    """How an item's GT contradicts its type: A is one passage (or one group of alternatives, any of
    which answers it, as benchmarks list them); B several in one document; C and D at least two (a
    comparison has two sides, a multi-hop question two hops)."""
    n = len(item.gt_context_ids)
    docs = {corpus.passages[c].doc_id for c in item.gt_context_ids if c in corpus.passages}
    if item.type == "A" and n != 1 and len(item.gt_groups) != 1:
        return [f"type A (single point) names exactly one GT passage; this item names {n}"]
    if item.type == "B" and n < 2:
        return ["type B (scattered in one document) names at least two GT passages; this item names 1"]
    if item.type == "B" and len(docs) > 1:
        return [f"type B keeps its GT passages in one document; these are in {len(docs)}: {', '.join(sorted(docs))}"]
    if item.type in ("C", "D") and n < 2:
        kind = "a comparison needs two sides" if item.type == "C" else "a multi-hop question needs two hops"
        return [f"type {item.type} names at least two GT passages ({kind}); this item names 1"]
    if item.type == "C" and len(docs) == 1:
        only = docs.pop()
        return [f"type C (cross-document comparison) has GT passages in two documents or more; all are in {only}"]
    return []


Model = TypeVar("Model", bound=BaseModel)


def read_models(path: Path, model: type[Model], what: str) -> tuple[list[tuple[int, Model]], list[Problem]]:
    """(line, object) for each line of a JSONL file that validates as ``model`` with an ``id`` not seen
    before; every other line is a problem naming file, line and field."""
    rows, problems = read_jsonl(path)
    out: list[tuple[int, Model]] = []
    first_line: dict[str, int] = {}
    for n, row in rows:
        try:
            obj = model.model_validate(row)
        except ValidationError as e:
            problems += problems_from_validation(str(path), e, n, noun="field", model=model)
            continue
        if obj.id in first_line:
            first = first_line[obj.id]
            problems.append(Problem(str(path), f"duplicate {what} id {obj.id!r} (first on line {first})", n, "id"))
            continue
        first_line[obj.id] = n
        out.append((n, obj))
    return out, problems


def load_golden(path: str | Path, corpus: Corpus) -> GoldenSet:
    """Load and validate a golden JSONL file against ``corpus``.

    Every problem is reported, each naming the file, line and field. A GT ID the
    corpus lacks is an error, unless the item's fingerprint shows the passage
    existed when the item was written: then it disappeared since, and
    :func:`staleness` reports it.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError([Problem(str(path), "golden set not found")])
    rows, problems = read_models(path, GoldenItem, "item")
    items: list[GoldenItem] = []
    for n, item in rows:
        unknown = [cid for cid in item.gt_context_ids if cid not in corpus.passages and cid not in item.gt_fingerprint]
        for cid in unknown:
            hint = _left_out(cid, corpus) or suggestion(cid, list(corpus.passages))
            problems.append(Problem(str(path), f"unknown context id {cid!r}{hint}", n, "gt_context_ids"))
        if not unknown:
            items.append(item)
    if problems:
        raise InputError(problems)
    if not items:
        raise InputError([Problem(str(path), "the golden set has no items")])
    lines = {item.id: n for n, item in rows}
    return GoldenSet(source=str(path), items=tuple(items), corpus_digest=corpus.digest, lines=lines)


def _left_out(cid: str, corpus: Corpus) -> str:
    """ "; empty.md was left out of the corpus: …" when the ID's document is one the loader skipped (an
    empty file): "unknown context id" alone sent the user looking for a typo."""
    doc = cid.split("#", 1)[0]
    for w in corpus.warnings:
        if "left out" in w.message and Path(w.file).as_posix().endswith("/" + doc):
            return f"; the corpus left {doc} out ({w.message.split(':')[0]})"
    return ""


def golden_stats(golden: GoldenSet, corpus: Corpus) -> dict:
    """Counts a maintainer looks at: items per type, GT sizes, documents touched."""
    by_type = Counter(i.type for i in golden.items)
    gt_sizes = [len(i.gt_context_ids) for i in golden.items]
    docs = {corpus.passages[c].doc_id for i in golden.items for c in i.gt_context_ids if c in corpus.passages}
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


# ---------------------------------------------------------------- fingerprints and staleness


def passage_fingerprint(text: str) -> str:
    """A short hash of one passage's text (the corpus loader has already normalised it)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(corpus: Corpus, ids: Iterable[str]) -> dict[str, str]:
    """GT passage ID → fingerprint of its current text (IDs the corpus lacks are left out)."""
    return {pid: passage_fingerprint(corpus.passages[pid].text) for pid in ids if pid in corpus.passages}


def with_fingerprint(item: GoldenItem, corpus: Corpus) -> GoldenItem:
    """The item with its GT fingerprint taken from ``corpus`` now."""
    return item.model_copy(update={"gt_fingerprint": fingerprint(corpus, item.gt_context_ids)})


@dataclass(frozen=True)
class Staleness:
    """Why one item's GT no longer matches what it was written against."""

    item_id: str
    where: str  # file:line
    changed: tuple[str, ...] = ()  # GT passages whose text differs from the fingerprint
    missing: tuple[str, ...] = ()  # GT passages the corpus no longer has
    unrecorded: tuple[str, ...] = ()  # GT passages added after the fingerprint was taken
    # A changed or missing GT passage whose recorded text is now, unchanged, under another ID (a
    # line added above shifts positional IDs, a renamed file moves them): old ID → new ID.
    moved: tuple[tuple[str, str], ...] = ()
    # A changed GT passage whose section is now split in ~pN passages the item does not name (a
    # paragraph added made it too long): its old text may be spread over them. ID → the splits.
    split: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Missing GT passages whose whole document is gone from the corpus (there is no new ID to point at).
    gone_documents: tuple[str, ...] = ()

    def __str__(self) -> str:
        now_at, splits = dict(self.moved), dict(self.split)

        def at(pid: str) -> str:
            if pid in now_at:
                return f" (its text is now {now_at[pid]})"
            if pid in splits:
                return f" (its section is now split: {', '.join(splits[pid])}; the answer may be in one of them)"
            if pid.split("#", 1)[0] in self.gone_documents:
                return f" (the document {pid.split('#', 1)[0]} is no longer in the corpus)"
            return ""

        parts = [
            *(f"GT passage {pid} changed{at(pid)}" for pid in self.changed),
            *(f"GT passage {pid} disappeared from the corpus{at(pid)}" for pid in self.missing),
            *(f"GT passage {pid} has no fingerprint (GT edited by hand?)" for pid in self.unrecorded),
        ]
        return f"{self.where}: {self.item_id}: " + "; ".join(parts)


def stale_advice(stale: list[Staleness]) -> str:
    """What to do about stale items: a passage whose text moved to another ID is pointed at it; a
    changed text is reviewed and accepted; one that disappeared needs the item's IDs fixed first."""
    steps = []
    if moved := [s.item_id for s in stale if s.moved]:
        steps.append(
            f"in {', '.join(moved)}, replace each GT ID whose text moved by the ID it is now at, then "
            "`ragtrack golden fingerprint --id ID` (accepting the old ID's new text would point the item "
            "at another passage)"
        )
    if split := [s.item_id for s in stale if s.split]:
        steps.append(
            f"in {', '.join(split)}, a GT passage's section is now split: name the split(s) that hold the "
            "answer (`ragtrack corpus show ID~p2`), then `ragtrack golden fingerprint --id ID`"
        )
    if dropped := [s.item_id for s in stale if s.gone_documents]:
        steps.append(f"rewrite or retire {', '.join(dropped)}: their GT documents are no longer in the corpus")
    moved_or_gone = {s.item_id: {old for old, _ in s.moved} | _in(s.missing, s.gone_documents) for s in stale}
    if gone := [s.item_id for s in stale if set(s.missing) - moved_or_gone[s.item_id]]:
        steps.append(
            f"point the gt_context_ids of {', '.join(gone)} at the passages' new IDs "
            '(`ragtrack corpus search "<words of the passage>"`)'
        )
    if any(set(s.changed) - {old for old, _ in s.moved} - {pid for pid, _ in s.split} for s in stale):
        steps.append("review the answers, then `ragtrack golden fingerprint --id ID` to accept the new text")
    if added := [s.item_id for s in stale if s.unrecorded]:
        steps.append(
            f"check the GT passages added to {', '.join(added)} by hand, then `ragtrack golden fingerprint "
            + " ".join(f"--id {i}" for i in added)
            + "` to record them"
        )
    return "; ".join(steps) + "; or pass --allow-stale to score them as they are"


def staleness(golden: GoldenSet, corpus: Corpus) -> list[Staleness]:
    """Items whose GT passages changed or disappeared since their fingerprint was taken.

    Items without a fingerprint cannot be checked and are not listed
    (:func:`unfingerprinted` names them).
    """
    out = []
    by_text: dict[str, list[str]] | None = None  # fingerprint → passage IDs, built once it is needed
    for item in golden.items:
        if not item.gt_fingerprint:
            continue
        now = fingerprint(corpus, item.gt_context_ids)
        missing = tuple(pid for pid in item.gt_context_ids if pid not in corpus.passages)
        unrecorded = tuple(pid for pid in now if pid not in item.gt_fingerprint)
        changed = tuple(pid for pid, fp in now.items() if pid in item.gt_fingerprint and item.gt_fingerprint[pid] != fp)
        if missing or unrecorded or changed:
            if by_text is None:
                by_text = _where_texts_are(corpus)
            moved = tuple(
                (pid, found[0])
                for pid in (*changed, *missing)
                if pid in item.gt_fingerprint and len(found := by_text.get(item.gt_fingerprint[pid], [])) == 1
            )
            moved_ids = {old for old, _ in moved}
            split = tuple(
                (pid, splits)
                for pid in changed
                if pid not in moved_ids
                and (
                    splits := tuple(
                        p for p in corpus.passages if p.startswith(f"{pid}~p") and p not in item.gt_context_ids
                    )
                )
            )
            gone = tuple(sorted({pid.split("#", 1)[0] for pid in missing} - set(corpus.documents)))
            out.append(Staleness(item.id, golden.where(item.id), changed, missing, unrecorded, moved, split, gone))
    return out


def _where_texts_are(corpus: Corpus) -> dict[str, list[str]]:
    """Fingerprint → the passages whose text it is. A long section's first passage carries its heading
    line ("## Kenya\n\n…"), its ``~pN`` splits do not: a paragraph inserted at the top moves the old
    first paragraph to ``~p2`` without the heading, so each split is also known as it would read
    under its section's heading line."""
    out: dict[str, list[str]] = {}
    for pid, passage in corpus.passages.items():
        out.setdefault(passage_fingerprint(passage.text), []).append(pid)
        first = corpus.passages.get(pid.split("~p", 1)[0]) if "~p" in pid else None
        if first is not None and first.text.startswith("#") and "\n\n" in first.text:
            heading = first.text[: first.text.index("\n\n") + 2]
            out.setdefault(passage_fingerprint(heading + passage.text), []).append(pid)
    return out


def _in(pids: tuple[str, ...], documents: tuple[str, ...]) -> set[str]:
    """The passage IDs that belong to one of ``documents``."""
    return {pid for pid in pids if pid.split("#", 1)[0] in documents}


def unfingerprinted(golden: GoldenSet) -> list[str]:
    return [i.id for i in golden.items if not i.gt_fingerprint]


def unanswered(golden: GoldenSet) -> list[str]:
    return [i.id for i in golden.items if not i.answered]


class GoldenNotReadyError(RagtrackError):
    """The golden set has items an eval must not score: unanswered, or stale GT."""


EXAMPLE_CAUTION = "the golden set is still example questions"  # how compare finds it among a run's cautions
#: The tag of an example item ``ragtrack init`` had an LLM write (an offline one carries the template tag).
EXAMPLE_TAG = "example"


def example_caution(golden: GoldenSet) -> str | None:
    """What to say when every item is still one of the examples ``ragtrack init`` writes (offline
    templates, or questions an LLM wrote): the figures then describe those, not the questions users ask."""
    from ragtrack.authoring.propose import TEMPLATE_TAG

    if not golden.items or not all({TEMPLATE_TAG, EXAMPLE_TAG} & set(i.tags) for i in golden.items):
        return None
    if all(TEMPLATE_TAG in i.tags for i in golden.items):
        what = (
            f"offline templates (tag {TEMPLATE_TAG!r}, as `ragtrack init` wrote them), so these figures "
            "describe the templates"
        )
    else:
        what = (
            f"the examples `ragtrack init` wrote (tag {EXAMPLE_TAG!r} or {TEMPLATE_TAG!r}), so these figures "
            "describe them"
        )
    return (
        f"{EXAMPLE_CAUTION}: all {len(golden.items)} items are {what}, not your users' questions; write your own "
        "(`ragtrack golden propose --doc …`, then review them)"
    )


def check_ready(golden: GoldenSet, corpus: Corpus, *, allow_stale: bool = False) -> list[Staleness]:
    """Refuse to score items without a GT answer, or whose GT moved (unless ``allow_stale``).

    Returns the stale items that ``allow_stale`` let through, so the caller can record them.
    """
    pending = unanswered(golden)
    stale = staleness(golden, corpus)
    lines = []
    if pending:
        lines.append(f"{len(pending)} item(s) have no GT answer yet: run `ragtrack golden answer`")
        lines += [f"  {golden.where(i)}: {i}: gt_answer is empty" for i in pending]
    if stale and not allow_stale:
        lines.append(f"{len(stale)} item(s) have stale GT (the corpus changed since they were written):")
        lines += [f"  {s}" for s in stale]
        lines.append(stale_advice(stale))
    if lines:
        raise GoldenNotReadyError("\n".join(lines))
    return stale


# ---------------------------------------------------------------- rewriting a golden file


def rewrite_golden(
    path: str | Path,
    *,
    replace: dict[str, GoldenItem] | None = None,
    append: Iterable[GoldenItem] = (),
    remove: Iterable[str] = (),
) -> None:
    """Rewrite a golden JSONL file atomically: replaced items in place, new ones at the end.

    Lines that are not touched keep their bytes, so a hand-formatted file stays
    as its author wrote it and a diff shows only what changed.
    """
    path = Path(path)
    replace, remove = replace or {}, set(remove)
    out = []
    for raw in read_text(path).splitlines() if path.is_file() else []:
        try:
            item_id = json.loads(raw).get("id") if raw.strip() else None
        except (json.JSONDecodeError, AttributeError):
            item_id = None
        if item_id in remove:
            continue
        out.append(replace[item_id].to_line() if item_id in replace else raw)
    out += [item.to_line() for item in append]
    atomic_write_text(path, "\n".join(line for line in out if line.strip()) + "\n")
