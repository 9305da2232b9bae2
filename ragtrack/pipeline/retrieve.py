"""First-stage retrieval: dense, BM25, or both fused with Reciprocal Rank Fusion.

Dense retrieval falls into the "relevance trap": a passage that *sounds* like
the question outranks the one that answers it, and rare entity names
(``ComfyUI-GGUF``, ``t5xxl_fp8_e4m3fn``) carry little weight in an embedding.
BM25 matches those names exactly. RRF merges the two rankings without having
to calibrate their incomparable scores: only ranks matter.

Each retrieval mode is a class registered in
:data:`ragtrack.pipeline.spec.RETRIEVAL_MODES`; it declares which indexes it
needs, so a version builds only those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ragtrack.pipeline.index import BM25Index, DenseIndex


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion: score(d) = Σ_lists 1 / (k + rank(d)), ranks from 1.

    Ties keep the order in which IDs were first seen (list by list), so the
    result is deterministic.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    order = {doc_id: n for n, doc_id in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


@dataclass
class Search:
    """Ranks chunk IDs for a query; subclasses are the retrieval modes."""

    needs_dense: ClassVar[bool] = False
    needs_bm25: ClassVar[bool] = False

    dense: DenseIndex | None
    bm25: BM25Index | None
    rrf_k: int = 60

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        raise NotImplementedError

    def search_many(self, queries: Sequence[str], k: int) -> list[tuple[str, float]]:
        """Multi-query retrieval: one ranking per query variant, fused with RRF."""
        if len(queries) == 1:
            return self.search(queries[0], k)
        rankings = [[cid for cid, _ in self.search(q, k)] for q in queries]
        return rrf_fuse(rankings, self.rrf_k)[:k]


class DenseSearch(Search):
    needs_dense = True

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return self.dense.search(query, k)


class BM25Search(Search):
    needs_bm25 = True

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return self.bm25.search(query, k)


class HybridSearch(Search):
    needs_dense = True
    needs_bm25 = True

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        dense = [cid for cid, _ in self.dense.search(query, k)]
        sparse = [cid for cid, _ in self.bm25.search(query, k)]
        return rrf_fuse([dense, sparse], self.rrf_k)[:k]
