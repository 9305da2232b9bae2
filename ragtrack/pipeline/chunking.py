"""Cutting the corpus into the units a version indexes, each tied to canonical passages.

Every unit records its provenance — the character spans of its document it was
cut from, or the passages it was generated from — and the canonical passage
IDs that provenance covers. That mapping is what lets v1's 500-character
windows and v3's parent sections be scored against the same golden IDs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from langchain_text_splitters import RecursiveCharacterTextSplitter

from ragtrack.corpus import Corpus, Document, Passage

if TYPE_CHECKING:
    from ragtrack.llm.client import LLM
    from ragtrack.pipeline.spec import FixedChunking, LLMSpec, ParentChildChunking

# Prefer paragraph, line and sentence boundaries (English and Chinese) before words.
SEPARATORS = ["\n\n", "\n", "。", "！", "？", ". ", "! ", "? ", "；", "; ", "，", ", ", " ", ""]


@dataclass(frozen=True)
class Chunk:
    """A unit a version indexes (and, unless it has a parent, returns as context)."""

    id: str
    text: str
    doc_id: str
    passage_ids: tuple[str, ...]
    spans: tuple[tuple[int, int], ...] = ()
    parent_id: str | None = None
    metadata: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class UnitContext:
    """What a chunking strategy may use: the corpus, the mapping threshold, and for LLM-made
    units (Q&A pairs) the version's LLM, its settings and its prompt files."""

    corpus: Corpus
    min_overlap: float
    llm: LLM
    llm_spec: LLMSpec
    prompt: Callable[[str], str]  # step name → prompt text


@dataclass
class Units:
    """What a version indexes (chunks) and, for small-to-big versions, what it returns (parents)."""

    chunks: list[Chunk]
    parents: dict[str, Chunk] = field(default_factory=dict)


def _splitter(size: int, overlap: int) -> RecursiveCharacterTextSplitter:
    return RecursiveCharacterTextSplitter(
        chunk_size=size,
        chunk_overlap=overlap,
        separators=SEPARATORS,
        keep_separator="end",
        add_start_index=True,
        strip_whitespace=True,
    )


def _windows(text: str, offset: int, size: int, overlap: int) -> list[tuple[str, int, int]]:
    """(piece, start, end) windows of ``text``; offsets are shifted into document coordinates."""
    out = []
    for doc in _splitter(size, overlap).create_documents([text]):
        start = offset + doc.metadata["start_index"]
        out.append((doc.page_content, start, start + len(doc.page_content)))
    return out


def fixed_chunks(corpus: Corpus, size: int, overlap: int, min_overlap: float) -> list[Chunk]:
    """v1: fixed-size windows over whole documents, blind to headings."""
    chunks = []
    for doc in corpus.documents.values():
        for n, (text, start, end) in enumerate(_windows(doc.text, 0, size, overlap)):
            chunks.append(
                Chunk(
                    id=f"{doc.id}::w{n:03d}",
                    text=text,
                    doc_id=doc.id,
                    passage_ids=tuple(corpus.passages_covering(doc.id, [(start, end)], min_overlap)),
                    spans=((start, end),),
                )
            )
    return chunks


def fixed_units(ctx: UnitContext, params: FixedChunking) -> Units:
    return Units(fixed_chunks(ctx.corpus, params.chunk_size, params.chunk_overlap, ctx.min_overlap))


SECTION, GROUPED, PASSAGE = "section", "grouped", "passage"  # how a parent was formed (Chunk.metadata["parent"])


def parent_groups(document: Document, parent_level: int, flat_parent_chars: int) -> list[tuple[str, list[Passage]]]:
    """Group a document's passages under parents, each with how it was formed.

    * A document split at headings: everything below one section at ``parent_level``
      shares a parent (even when that section has no body text of its own); shallower
      passages are parents on their own (``section``). Levels count from a title: a
      Markdown file's single ``#`` heading is level 1, so ``##`` sections are parents at
      level 2; a document without one title heading (a Chinese manual whose title is a
      plain line above ``一、``) counts its top headings as level 2.
    * A flat document — a heading-less text split at paragraphs, a JSONL document of
      several passages: consecutive passages are grouped while the group spans at most
      ``flat_parent_chars`` (``grouped``), so small-to-big still returns more than the
      passage that matched.
    * A document of one passage is its own parent (``passage``): nothing to group.
    """
    passages = document.passages
    if len(passages) == 1:
        return [(PASSAGE, list(passages))]
    if not document.sectioned:
        groups: list[list[Passage]] = []
        for p in passages:
            if groups and p.end - groups[-1][0].start <= flat_parent_chars:
                groups[-1].append(p)
            else:
                groups.append([p])
        return [(GROUPED if len(g) > 1 else PASSAGE, g) for g in groups]
    titled = len({p.heading_path[0] for p in passages if p.heading_path}) == 1
    level = parent_level if titled else parent_level - 1
    sections: list[list[Passage]] = []
    last_key: tuple | None = None
    for p in passages:
        deep = len(p.heading_path) >= level > 0
        key = ("section", *p.heading_path[:level]) if deep else ("own", p.id)
        if sections and key == last_key:
            sections[-1].append(p)
        else:
            sections.append([p])
        last_key = key
    return [(SECTION, g) for g in sections]


def parent_child_chunks(
    corpus: Corpus,
    parent_level: int,
    child_max_chars: int,
    child_overlap: int,
    min_overlap: float,
    flat_parent_chars: int,
) -> tuple[list[Chunk], dict[str, Chunk]]:
    """v3 "small to big": index small children, return their parent.

    Children are windows of at most ``child_max_chars`` inside each passage
    (whole short sections, or sentence windows of long ones); the parent is the
    enclosing section at ``parent_level`` with everything nested under it, or a
    group of consecutive passages of a flat document (see :func:`parent_groups`).
    """
    children: list[Chunk] = []
    parents: dict[str, Chunk] = {}
    for doc in corpus.documents.values():
        for g, (kind, group) in enumerate(parent_groups(doc, parent_level, flat_parent_chars)):
            start, end = group[0].start, group[-1].end
            parent = Chunk(
                id=f"{doc.id}::p{g:03d}",
                text=doc.text[start:end],
                doc_id=doc.id,
                passage_ids=tuple(p.id for p in group),
                spans=((start, end),),
                metadata={"title": group[0].title, "parent": kind},
            )
            parents[parent.id] = parent
            n = 0
            for p in group:
                for text, s, e in _windows(p.text, p.start, child_max_chars, child_overlap):
                    children.append(
                        Chunk(
                            id=f"{parent.id}.c{n:02d}",
                            text=text,
                            doc_id=doc.id,
                            passage_ids=tuple(corpus.passages_covering(doc.id, [(s, e)], min_overlap)),
                            spans=((s, e),),
                            parent_id=parent.id,
                        )
                    )
                    n += 1
    return children, parents


def parent_child_units(ctx: UnitContext, params: ParentChildChunking) -> Units:
    children, parents = parent_child_chunks(
        ctx.corpus,
        params.parent_level,
        params.child_max_chars,
        params.child_overlap,
        ctx.min_overlap,
        params.flat_parent_chars,
    )
    return Units(children, parents)
