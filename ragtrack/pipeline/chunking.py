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

from ragtrack.corpus import Corpus, Passage

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


def parent_groups(passages: tuple[Passage, ...], parent_level: int) -> list[list[Passage]]:
    """Group a document's passages under parents: everything below one section at
    ``parent_level`` shares a parent (even when that section has no body text of
    its own); shallower passages are parents on their own.

    With JSONL corpora every passage has at most a title, so each passage is its own parent.
    """
    groups: list[list[Passage]] = []
    last_key: tuple | None = None
    for p in passages:
        deep = len(p.heading_path) >= parent_level
        key = ("section", *p.heading_path[:parent_level]) if deep else ("own", p.id)
        if groups and key == last_key:
            groups[-1].append(p)
        else:
            groups.append([p])
        last_key = key
    return groups


def parent_child_chunks(
    corpus: Corpus, parent_level: int, child_max_chars: int, child_overlap: int, min_overlap: float
) -> tuple[list[Chunk], dict[str, Chunk]]:
    """v3 "small to big": index small children, return their parent section.

    Children are windows of at most ``child_max_chars`` inside each passage
    (whole short sections, or sentence windows of long ones); the parent is the
    enclosing section at ``parent_level`` with everything nested under it.
    """
    children: list[Chunk] = []
    parents: dict[str, Chunk] = {}
    for doc in corpus.documents.values():
        for g, group in enumerate(parent_groups(doc.passages, parent_level)):
            start, end = group[0].start, group[-1].end
            parent = Chunk(
                id=f"{doc.id}::p{g:03d}",
                text=doc.text[start:end],
                doc_id=doc.id,
                passage_ids=tuple(p.id for p in group),
                spans=((start, end),),
                metadata={"title": group[0].title},
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
        ctx.corpus, params.parent_level, params.child_max_chars, params.child_overlap, ctx.min_overlap
    )
    return Units(children, parents)
