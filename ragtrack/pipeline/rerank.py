"""Second stage: re-score a wide candidate pool and keep the best few.

The real thing is a cross-encoder (the bge-reranker family through
FlagEmbedding): it reads query and passage together, so it sees *whether the
passage answers*, not only whether it is about the same topic. When a spec's
cross-encoder is not available offline, it may declare a bi-encoder
substitute, which re-scores candidates by embedding cosine with the original
question — weaker, and recorded as a substitution in every run that uses it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ragtrack.pipeline.embedding import Embedder
from ragtrack.pipeline.models import ResolvedModel


class Reranker(Protocol):
    model: ResolvedModel
    kind: str

    def scores(self, query: str, texts: list[str]) -> list[float]: ...


class CrossEncoderReranker:
    """FlagEmbedding's ``FlagReranker`` on the CPU."""

    kind = "cross-encoder"

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


class BiEncoderReranker:
    """Cosine between the question and each candidate, with a sentence embedder."""

    kind = "bi-encoder"

    def __init__(self, model: ResolvedModel, embedder: Embedder):
        self.model = model
        self._embedder = embedder

    def scores(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        q = self._embedder.encode([query])[0]
        return [float(s) for s in self._embedder.encode(texts) @ q]


def rerank(reranker: Reranker, query: str, candidates: list[tuple[str, str]], top_n: int) -> list[tuple[str, float]]:
    """``candidates`` are (id, text); returns the ``top_n`` (id, score), best first, stable on ties."""
    scores = reranker.scores(query, [text for _, text in candidates])
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])
    return [(candidates[i][0], scores[i]) for i in order[:top_n]]
