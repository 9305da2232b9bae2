"""Dense (FAISS) and sparse (BM25) indexes over chunks, with an on-disk cache.

The dense index is langchain-community's FAISS vector store over an exact
inner-product index (vectors are unit length, so scores are cosines). On disk
it is the raw FAISS index plus the chunks as JSON — never a pickle, which
``FAISS.load_local`` would unpickle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_community.vectorstores import FAISS
from langchain_community.vectorstores.utils import DistanceStrategy
from langchain_core.documents import Document as LCDocument

from ragtrack.caches import mark_used
from ragtrack.files import atomic_folder
from ragtrack.pipeline.chunking import Chunk, Units
from ragtrack.pipeline.embedding import Embedder
from ragtrack.text import zh_words

log = logging.getLogger(__name__)


def cache_key(*parts: object) -> str:
    """Stable key over JSON-able parts (corpus digest, chunking params, model, step prompts…)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def chunk_from_json(row: dict) -> Chunk:
    return Chunk(
        id=row["id"],
        text=row["text"],
        doc_id=row["doc_id"],
        passage_ids=tuple(row["passage_ids"]),
        spans=tuple(tuple(s) for s in row["spans"]),
        parent_id=row.get("parent_id"),
        metadata=row.get("metadata") or {},
    )


class DenseIndex:
    """Cosine top-k over chunk embeddings via langchain's FAISS store."""

    def __init__(self, chunks: list[Chunk], embedder: Embedder, index: faiss.Index):
        self.chunks = {c.id: c for c in chunks}
        self.embedder = embedder
        ids = [c.id for c in chunks]
        self.store = FAISS(
            embedding_function=embedder,
            index=index,
            docstore=InMemoryDocstore({c.id: LCDocument(page_content=c.text, id=c.id) for c in chunks}),
            index_to_docstore_id=dict(enumerate(ids)),
            distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
        )

    @classmethod
    def build(cls, chunks: list[Chunk], embedder: Embedder) -> DenseIndex:
        vectors = embedder.encode([c.text for c in chunks])
        index = faiss.IndexFlatIP(vectors.shape[1] if len(vectors) else embedder.dimension)
        index.add(vectors)
        return cls(chunks, embedder, index)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return self.search_vector(self.embedder.encode([query])[0], k)

    def search_vector(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        hits = self.store.similarity_search_with_score_by_vector(vector.tolist(), k=min(k, len(self.chunks)))
        return [(doc.id, float(score)) for doc, score in hits]


def save_index(folder: Path, units: Units, dense: DenseIndex | None) -> None:
    """Write atomically (temp folder, then rename): a half-written entry would poison later runs.
    A cache that cannot be written costs the next run a rebuild, never this run its result."""
    try:
        _write_index(folder, units, dense)
    except OSError as e:
        log.warning("cannot cache the index in %s (%s); the next run builds it again", folder, e.strerror or e)


def _write_index(folder: Path, units: Units, dense: DenseIndex | None) -> None:
    with atomic_folder(folder) as tmp:
        payload = {"chunks": [asdict(c) for c in units.chunks], "parents": [asdict(c) for c in units.parents.values()]}
        (tmp / "units.json").write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        if dense is not None:
            faiss.write_index(dense.store.index, str(tmp / "dense.faiss"))


def load_index(folder: Path, embedder: Embedder, need_dense: bool) -> tuple[Units, DenseIndex | None] | None:
    """The cached units and dense index (when needed); None on a miss or damage."""
    try:
        data = json.loads((folder / "units.json").read_text(encoding="utf-8"))
        index = faiss.read_index(str(folder / "dense.faiss")) if need_dense else None
        chunks = [chunk_from_json(r) for r in data["chunks"]]
        parents = {r["id"]: chunk_from_json(r) for r in data["parents"]}
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
    mark_used(folder)
    dense = DenseIndex(chunks, embedder, index) if index is not None else None
    return Units(chunks, parents), dense


_WORD = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def tokenize_en(text: str) -> list[str]:
    """Lower-cased word tokens; keeps ``t5xxl_fp8_e4m3fn``-style identifiers whole."""
    return _WORD.findall(text.lower())


def tokenizer_for(language: str):
    """BM25 tokens: jieba words for Chinese corpora (Latin words pass through whole)."""
    return zh_words if language == "zh" else tokenize_en


class BM25Index:
    """Okapi BM25 over chunk texts, as bm25s's sparse score matrix (a query is a few column sums).

    Robertson's variant with k1 = 1.2, b = 0.75: the idf of a word found in more than
    half of the texts is 0 (rank_bm25, used before, gave such words a floor of a quarter of
    the average idf, so "the" and "of" weighed as much as a rare name's quarter).
    """

    def __init__(self, chunks: list[Chunk], language: str, k1: float = 1.2, b: float = 0.75):
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it sets itself to DEBUG when imported
        self.ids = [c.id for c in chunks]
        self.tokenize = tokenizer_for(language)
        self.language = language
        self.vocab: dict[str, int] = {}
        docs = [[self.vocab.setdefault(t, len(self.vocab)) for t in self.tokenize(c.text)] for c in chunks]
        self.bm25 = bm25s.BM25(method="robertson", k1=k1, b=b)
        self.bm25.index((docs, self.vocab), show_progress=False)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - lives as long as its index; a query is ranked once
    def ranking(self, query: str, depth: int = 1000) -> tuple[tuple[str, float], ...]:
        """The ``depth`` best texts with a positive score for ``query``, best first (ties in index order)."""
        known = [self.vocab[t] for t in self.tokenize(query) if t in self.vocab]
        if not known:
            return ()
        scores = self.bm25.get_scores_from_ids(known)
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > depth:  # keep every text scoring at least the depth-th best (ties included)
            cut = np.partition(scores[candidates], -depth)[-depth]
            candidates = candidates[scores[candidates] >= cut]
        order = candidates[np.argsort(-scores[candidates], kind="stable")][:depth]
        return tuple((self.ids[i], float(scores[i])) for i in order)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return list(self.ranking(query, max(k, 1000))[:k])
