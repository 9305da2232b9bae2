"""The RAG behind the loopback platform servers: a folder re-chunked the platform's way, lexical search,
extractive answers. Small and deterministic; no model.

A platform never cuts documents where ragtrack's corpus does (one passage per
heading section), so the servers chunk their own way: paragraphs (Dify) or
lines (RAGFlow) packed into segments of at most ``max_chars`` characters,
after the platform's own cleaning (Dify collapses runs of spaces; RAGFlow
drops Markdown heading marks). A segment can therefore hold part of a
section, or the end of one and the start of the next — what the mapping in
:mod:`ragtrack.agents.mapping` has to cope with.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.corpus import load_corpus
from ragtrack.pipeline.chunking import Chunk
from ragtrack.pipeline.index import BM25Index
from ragtrack.text import content_tokens, split_sentences

_NAMESPACE = uuid.UUID("6f1c2a4e-58b0-4d4b-9a57-2f0f3c1e9d11")


def stable_id(*parts: str) -> uuid.UUID:
    """The same ID for the same name on every run, so documented commands keep working."""
    return uuid.uuid5(_NAMESPACE, "/".join(parts))


@dataclass(frozen=True)
class Segment:
    id: str
    document: Document
    position: int  # 1-based, in its document
    text: str


@dataclass(eq=False)
class Document:
    id: str
    name: str
    position: int
    segments: list[Segment] = field(default_factory=list)


def pack(pieces: list[str], max_chars: int, joiner: str) -> list[str]:
    """Consecutive pieces joined while they fit in ``max_chars``; a longer piece is cut at sentence ends
    (a sentence longer still is cut hard)."""
    units: list[str] = []
    for piece in pieces:
        if len(piece) <= max_chars:
            units.append(piece)
            continue
        current = ""
        for sentence in re.split(r"(?<=[.!?。！？])\s+", piece):
            while len(sentence) > max_chars:
                units.append(sentence[:max_chars])
                sentence = sentence[max_chars:]
            if current and len(current) + 1 + len(sentence) > max_chars:
                units.append(current)
                current = ""
            current = f"{current} {sentence}" if current else sentence
        if current:
            units.append(current)
    out: list[str] = []
    for unit in units:
        if out and len(out[-1]) + len(joiner) + len(unit) <= max_chars:
            out[-1] += joiner + unit
        else:
            out.append(unit)
    return out


def dify_chunks(text: str, max_chars: int) -> list[str]:
    """Dify's "automatic" mode, roughly: paragraphs (blank-line separated), runs of spaces and tabs
    collapsed, packed up to ``max_chars``."""
    paragraphs = [re.sub(r"[ \t]+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return pack([p for p in paragraphs if p], max_chars, "\n")


def ragflow_chunks(text: str, max_chars: int) -> list[str]:
    """RAGFlow's "naive" parser, roughly: lines without Markdown heading marks, packed up to ``max_chars``."""
    lines = [re.sub(r"^#{1,6}\s+", "", line).strip() for line in text.split("\n")]
    return pack([line for line in lines if line], max_chars, "\n")


class Knowledge:
    """A folder of .md/.txt files as a platform's knowledge base: documents, segments, search."""

    def __init__(self, folder: str | Path, chunker, max_chars: int, ids=lambda *parts: str(stable_id(*parts))):
        corpus = load_corpus(folder)  # the files as documents; the corpus' own passages are not used
        self.documents: list[Document] = []
        self.segments: list[Segment] = []
        for n, (name, doc) in enumerate(corpus.documents.items(), start=1):
            document = Document(ids("document", name), name, n)
            for position, text in enumerate(chunker(doc.text, max_chars), start=1):
                segment = Segment(ids("segment", name, str(position)), document, position, text)
                document.segments.append(segment)
                self.segments.append(segment)
            self.documents.append(document)
        texts = [Chunk(str(n), s.text, s.document.name, ()) for n, s in enumerate(self.segments)]
        self._bm25 = BM25Index(texts, corpus.language)

    def search(self, query: str, k: int) -> list[tuple[Segment, float]]:
        """The ``k`` best segments by BM25, scores scaled to (0, 1]; ties keep corpus order."""
        ranked = self._bm25.search(query, k)
        top = ranked[0][1] if ranked else 1.0
        return [(self.segments[int(n)], round(score / top, 4)) for n, score in ranked]


def extractive_answer(question: str, segments: list[Segment]) -> str:
    """The sentence of the retrieved segments that shares the most content words with the question."""
    words = set(content_tokens(question))
    best, best_score = "", 0
    for segment in segments:
        for sentence in split_sentences(segment.text):
            score = len(words & set(content_tokens(sentence)))
            if score > best_score:
                best, best_score = sentence, score
    return best or "I could not find this in the knowledge base."
