"""Second stage: re-score a wide candidate pool with a cross-encoder and keep the best few.

A cross-encoder (the bge-reranker family, through FlagEmbedding) reads query
and passage together, so it sees *whether the passage answers*, not only
whether it is about the same topic — the fix for the relevance trap that
bi-encoder similarity falls into.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ragtrack.pipeline.models import ResolvedModel


class Reranker(Protocol):
    model: ResolvedModel

    def scores(self, query: str, texts: list[str]) -> list[float]: ...


class CrossEncoderReranker:
    """FlagEmbedding's ``FlagReranker`` on the CPU."""

    def __init__(self, model: ResolvedModel, max_length: int = 512, batch_size: int = 16):
        from FlagEmbedding import FlagReranker

        self.model = model
        self._reranker = FlagReranker(
            model.path, use_fp16=False, devices="cpu", batch_size=batch_size, max_length=max_length
        )

    def scores(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        raw = self._reranker.compute_score([(query, t) for t in texts])
        return [float(s) for s in np.atleast_1d(raw)]


def rerank(reranker: Reranker, query: str, candidates: list[tuple[str, str]], top_n: int) -> list[tuple[str, float]]:
    """``candidates`` are (id, text); returns the ``top_n`` (id, score), best first, stable on ties."""
    scores = reranker.scores(query, [text for _, text in candidates])
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])
    return [(candidates[i][0], scores[i]) for i in order[:top_n]]
