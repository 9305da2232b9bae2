"""Dense (FAISS) and sparse (BM25) indexes over chunks, with an on-disk cache.

The dense index is langchain-community's FAISS vector store over an exact
inner-product index (vectors are unit length, so scores are cosines). On disk
it is the raw FAISS index plus the chunks as JSON — never a pickle, which
``FAISS.load_local`` would unpickle.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_community.vectorstores import FAISS
from langchain_community.vectorstores.utils import DistanceStrategy
from langchain_core.documents import Document as LCDocument
from rank_bm25 import BM25Okapi

from ragtrack.files import atomic_folder
from ragtrack.pipeline.chunking import Chunk, Units
from ragtrack.pipeline.embedding import Embedder
from ragtrack.text import zh_words


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
    """Write atomically (temp folder, then rename): a half-written entry would poison later runs."""
    with atomic_folder(folder) as tmp:
        payload = {"chunks": [asdict(c) for c in units.chunks], "parents": [asdict(c) for c in units.parents.values()]}
        (tmp / "units.json").write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        if dense is not None:
            faiss.write_index(dense.store.index, str(tmp / "dense.faiss"))


def load_index(folder: Path, embedder: Embedder, need_dense: bool) -> tuple[Units, DenseIndex | None] | None:
    """The cached units (and dense index when needed), or None on a miss or a damaged entry."""
    try:
        data = json.loads((folder / "units.json").read_text(encoding="utf-8"))
        index = faiss.read_index(str(folder / "dense.faiss")) if need_dense else None
        chunks = [chunk_from_json(r) for r in data["chunks"]]
        parents = {r["id"]: chunk_from_json(r) for r in data["parents"]}
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
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
    """Okapi BM25 (rank-bm25) over chunk texts."""

    def __init__(self, chunks: list[Chunk], language: str, k1: float = 1.2, b: float = 0.75):
        self.ids = [c.id for c in chunks]
        self.tokenize = tokenizer_for(language)
        self.language = language
        self.bm25 = BM25Okapi([self.tokenize(c.text) or [""] for c in chunks], k1=k1, b=b)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        tokens = self.tokenize(query)
        if not tokens:
            return []
        scores = self.bm25.get_scores(tokens)
        top = np.argsort(-scores, kind="stable")[:k]
        return [(self.ids[i], float(scores[i])) for i in top if scores[i] > 0]
