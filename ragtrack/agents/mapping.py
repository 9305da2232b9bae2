"""An external agent's contexts → canonical passage IDs: by the platform's ID table, else by text.

A platform returns its own segments (a Dify segment, a RAGFlow chunk, a
LangChain Document) with its own IDs and its own cut of the text. To score it
against a golden set, each segment is mapped to the corpus passages:

1. **ID table** (written by ``ragtrack corpus import``): platform segment ID →
   passage IDs, used whenever the segment's ID is in the table — checked
   against the segment's text (step 3): a text found only in other passages
   means the segment was edited since the import (Dify keeps the ID), and it
   is mapped there (``text 1.00 (id table stale)``); a text that also covers
   a neighbour (merged citations) adds it (``id_table+text``); a text found
   nowhere leaves the table's answer.
2. **Passage ID**: an agent over ragtrack's own corpus (a Python function
   that indexed it) may return the passage IDs themselves: a segment whose ID
   is a passage of the corpus maps to it, whatever its text.
3. **Text**: the segment is located in the corpus and mapped to every passage
   it covers or that covers it, by the same min-overlap rule as ragtrack's own
   chunks (:meth:`Corpus.passages_covering`). Both sides are normalised first,
   so what platforms change does not matter: whitespace and line breaks,
   Markdown heading marks, bullets and emphasis, HTML tags, full-width vs
   half-width forms and all punctuation are dropped, letters case-folded. A
   segment may be part of a passage or span several. It is located when at
   least ``min_overlap`` of its normalised text is found, verbatim, in one
   region of one document; the record says how much (``text 0.83``).
4. Otherwise it is **unmapped**: it still counts as retrieved and non-relevant.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import threading
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ragtrack.agent import RetrievedContext
from ragtrack.corpus import Corpus
from ragtrack.errors import InputError, Problem
from ragtrack.files import read_text

ID_TABLE_FORMAT = 1
_LINE_MARK = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|[-*+][ \t]+|\d{1,3}[.)][ \t]+|>[ \t]*)+", re.MULTILINE)
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
SHINGLE = 6  # normalised characters per indexed shingle
STRIDE = 3  # the corpus is indexed at every STRIDE-th position: verbatim runs of 8+ characters are found
_COMMON = 2000  # shingles in more places than this carry no information


@dataclass(frozen=True)
class PlatformContext:
    """One context as a platform returned it, before mapping."""

    id: str
    text: str
    doc_id: str = ""  # the platform's document ID
    doc_name: str = ""  # the platform's document name (often the file name)
    score: float | None = None


def id_table_path(corpus_source: str | Path) -> Path:
    """Where the ID table of a corpus lives: ``golden/dify-kb.jsonl`` → ``golden/dify-kb.ids.json``."""
    path = Path(corpus_source)
    return path.parent / f"{path.name if path.is_dir() else path.stem}.ids.json"


@dataclass(frozen=True)
class IdTable:
    """Platform segment ID → canonical passage IDs (and platform document ID → corpus document)."""

    path: str
    segments: dict[str, tuple[str, ...]]
    documents: dict[str, str]
    digest: str

    @classmethod
    def load(cls, path: Path, corpus: Corpus) -> IdTable | None:
        """The table at ``path`` restricted to passages of ``corpus``; None when there is no file."""
        if not path.is_file():
            return None
        text = read_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError([Problem(str(path), f"bad JSON: {e.msg}", e.lineno)]) from None
        segments = data.get("segments") if isinstance(data, dict) else None
        if not isinstance(segments, dict) or not all(isinstance(v, list) for v in segments.values()):
            raise InputError(
                [Problem(str(path), "expected an object of segment ID → list of passage IDs", None, "segments")]
            )
        documents = data.get("documents") or {}
        known = corpus.passages
        return cls(
            str(path),
            {str(k): tuple(p for p in v if p in known) for k, v in segments.items()},
            {str(k): str(v) for k, v in documents.items() if str(v) in corpus.documents},
            hashlib.sha256(text.encode()).hexdigest()[:12],
        )


def normalise(text: str) -> tuple[str, list[int]]:
    """Only letters and digits, case-folded and NFKC-normalised, with each one's offset in ``text``.

    Markdown line marks (headings, bullets, list numbers, quotes) and HTML tags
    are dropped first, then every character that is not alphanumeric.
    """
    keep = [True] * len(text)
    for pattern in (_LINE_MARK, _HTML_TAG):
        for m in pattern.finditer(text):
            keep[m.start() : m.end()] = [False] * (m.end() - m.start())
    chars, offsets = [], []
    for i, ch in enumerate(text):
        if not keep[i]:
            continue
        for c in unicodedata.normalize("NFKC", ch).casefold():
            if c.isalnum():
                chars.append(c)
                offsets.append(i)
    return "".join(chars), offsets


@dataclass(frozen=True)
class Location:
    doc_id: str
    start: int  # character span in the document's text
    end: int
    share: float  # of the context's normalised text found there
    # The verbatim runs inside that span (character spans of the document's text): the gaps between
    # them are text the context does not hold (a dropped URL, or a whole passage a title run jumps over).
    runs: tuple[tuple[int, int], ...] = ()

    def passages(self, corpus: Corpus, min_overlap: float) -> list[str]:
        """The passages the context's matched text covers: one counts when the characters matched inside
        it are at least ``min_overlap`` of the shorter of it and all matched text (the rule of
        :meth:`Corpus.passages_covering`, on what matched instead of the span from first to last run,
        which credited a chunk "<document title> + passage 2" with passage 1 too)."""
        runs = self.runs or ((self.start, self.end),)
        matched = sum(end - start for start, end in runs)
        hits = []
        for p in corpus.documents[self.doc_id].passages:
            inside = sum(max(0, min(end, p.end) - max(start, p.start)) for start, end in runs)
            if inside > 0 and inside >= min_overlap * min(p.end - p.start, matched):
                hits.append(p.id)
        return hits


class TextLocator:
    """Finds where a piece of text lies in the corpus, through a shingle index of the normalised documents."""

    def __init__(self, corpus: Corpus):
        self.doc_ids = list(corpus.documents)
        parts, self.starts, self.offsets = [], [], []
        pos = 0
        for doc_id in self.doc_ids:
            norm, offsets = normalise(corpus.documents[doc_id].text)
            self.starts.append(pos)
            self.offsets.append(offsets)
            parts.append(norm)
            pos += len(norm) + 1
        self.text = "\0".join(parts)  # \0 is never alphanumeric: no match runs across documents
        index: dict[str, list[int]] = defaultdict(list)
        for p in range(0, len(self.text) - SHINGLE + 1, STRIDE):
            shingle = self.text[p : p + SHINGLE]
            if "\0" not in shingle:
                index[shingle].append(p)
        self.index = {k: v for k, v in index.items() if len(v) <= _COMMON}

    def _doc_of(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos) - 1

    def locate(self, text: str) -> list[Location]:
        """Every document region holding at least part of ``text``, best first."""
        ctx, _ = normalise(text)
        if not ctx:
            return []
        if len(ctx) < SHINGLE + STRIDE - 1:  # too short for the index: exact search
            at = self.text.find(ctx)
            if at < 0 or self.text.find(ctx, at + 1) >= 0:
                # Absent, or a few characters found in several places (a heading word, a product
                # name): they name no passage, and mapping them to every place inflated recall.
                return []
            return self._locations([(at, at + len(ctx), len(ctx))], len(ctx))
        return self._locations(self._runs(ctx), len(ctx))

    def _runs(self, ctx: str) -> list[tuple[int, int, int]]:
        """Verbatim runs shared by ``ctx`` and the corpus: (corpus start, corpus end, context start)."""
        runs: list[tuple[int, int, int]] = []
        seen: set[tuple[int, int]] = set()  # (diagonal, context position) already inside a run
        for j in range(len(ctx) - SHINGLE + 1):
            for p in self.index.get(ctx[j : j + SHINGLE], ()):
                d = p - j
                if (d, j) in seen:
                    continue
                a, b = j, j + SHINGLE
                while a > 0 and a - 1 + d >= 0 and ctx[a - 1] == self.text[a - 1 + d]:
                    a -= 1
                while b < len(ctx) and b + d < len(self.text) and ctx[b] == self.text[b + d]:
                    b += 1
                seen.update((d, k) for k in range(a, b))
                runs.append((a + d, b + d, a))
        return runs

    def _locations(self, runs: list[tuple[int, int, int]], length: int) -> list[Location]:
        by_doc: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for run in runs:
            by_doc[self._doc_of(run[0])].append(run)
        found = []
        for doc, doc_runs in by_doc.items():
            kept, covered = _chain(doc_runs, length)
            offsets, base = self.offsets[doc], self.starts[doc]
            lo, hi = min(r[0] for r in kept) - base, max(r[1] for r in kept) - base
            spans = tuple(sorted((offsets[a - base], offsets[b - base - 1] + 1) for a, b, _ in kept))
            found.append(Location(self.doc_ids[doc], offsets[lo], offsets[hi - 1] + 1, covered / length, spans))
        return sorted(found, key=lambda x: (-x.share, x.doc_id))


def _chain(runs: list[tuple[int, int, int]], length: int) -> tuple[list[tuple[int, int, int]], int]:
    """The runs that read as one passage of the document, and how many context characters they cover.

    Longest first, a run is kept when it covers context characters no kept run
    covers and lies in the same order in the document as in the context, not
    much further away than the context is long (the platform may have dropped
    text, such as a URL, in between). The same words elsewhere in the document
    ("defaults to" in the section before) fail one test or the other.
    """
    kept: list[tuple[int, int, int]] = []
    covered: set[int] = set()
    for start, end, j in sorted(runs, key=lambda r: (r[0] - r[1], r[2])):
        new = set(range(j, j + end - start)) - covered
        if kept and len(new) < SHINGLE:
            continue
        if all(_in_order((start, end, j), other, length) for other in kept):
            kept.append((start, end, j))
            covered |= new
    return kept, len(covered)


def _in_order(a: tuple[int, int, int], b: tuple[int, int, int], length: int) -> bool:
    if a[2] > b[2]:
        a, b = b, a  # a comes first in the context
    doc_gap, ctx_gap = b[0] - a[1], b[2] - (a[2] + a[1] - a[0])
    return -SHINGLE <= doc_gap <= max(ctx_gap, 0) + length


class ContextMapper:
    """Maps platform contexts to canonical passages: ID table first, then text (see the module doc)."""

    def __init__(self, corpus: Corpus, min_overlap: float, id_table: IdTable | None = None):
        self.corpus, self.min_overlap, self.id_table = corpus, min_overlap, id_table
        self._locator: TextLocator | None = None
        self._lock = threading.Lock()

    @property
    def locator(self) -> TextLocator:
        with self._lock:  # built on first need
            if self._locator is None:
                self._locator = TextLocator(self.corpus)
            return self._locator

    def map(self, ctx: PlatformContext) -> RetrievedContext:
        if self.id_table is not None and (ids := self.id_table.segments.get(ctx.id)):
            return self._by_id(ctx, ids)
        if ctx.id in self.corpus.passages:
            return RetrievedContext(ctx.id, ctx.text, (ctx.id,), ctx.score, "passage_id")
        found, share = self._by_text(ctx)
        if not found:
            return RetrievedContext(ctx.id, ctx.text, (), ctx.score, "unmapped")
        return RetrievedContext(ctx.id, ctx.text, found, ctx.score, f"text {share:.2f}")

    def _by_text(self, ctx: PlatformContext) -> tuple[tuple[str, ...], float]:
        """The passages the context's text covers, and the share of it found (none: ``()``)."""
        candidates = [loc for loc in self.locator.locate(ctx.text) if loc.share >= self.min_overlap]
        hinted = [loc for loc in candidates if self._names(loc.doc_id, ctx)]
        best = hinted or [loc for loc in candidates if candidates and loc.share == candidates[0].share]
        ids: list[str] = []
        for loc in best:
            ids += loc.passages(self.corpus, self.min_overlap)
        return tuple(dict.fromkeys(ids)), best[0].share if best else 0.0

    def _by_id(self, ctx: PlatformContext, ids: tuple[str, ...]) -> RetrievedContext:
        """A segment of the ID table, checked against its text. Dify keeps a segment's ID when its text
        is edited: a text now found in other passages is mapped there (the table is stale), and one
        merged with its neighbour's (recent Dify merges a document's citations) covers both."""
        found, share = self._by_text(ctx) if ctx.text.strip() else ((), 0.0)
        if found and not set(found) & set(ids):
            return RetrievedContext(ctx.id, ctx.text, found, ctx.score, f"text {share:.2f} (id table stale)")
        if found and not set(found) <= set(ids):
            return RetrievedContext(ctx.id, ctx.text, tuple(dict.fromkeys((*ids, *found))), ctx.score, "id_table+text")
        return RetrievedContext(ctx.id, ctx.text, ids, ctx.score, "id_table")

    def _names(self, doc_id: str, ctx: PlatformContext) -> bool:
        """The context says it comes from this corpus document (by platform ID or by file name)."""
        if self.id_table is not None and self.id_table.documents.get(ctx.doc_id) == doc_id:
            return True
        name = ctx.doc_name
        return bool(name) and (doc_id == name or doc_id.endswith("/" + name) or name.endswith("/" + doc_id))
