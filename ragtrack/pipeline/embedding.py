"""Sentence embeddings, loaded offline through sentence-transformers.

sentence-transformers reads the pooling and normalisation a model was trained
with from its own folder (mean pooling for MiniLM, CLS for bge), which a bare
transformers or FlagModel loader would have to be told by hand.
"""

from __future__ import annotations

import threading

import numpy as np
from langchain_core.embeddings import Embeddings

from ragtrack.pipeline.models import ResolvedModel


class Embedder(Embeddings):
    """A langchain ``Embeddings`` over a local sentence-transformers model, counting its work."""

    def __init__(self, model: ResolvedModel, batch_size: int = 32):
        from sentence_transformers import SentenceTransformer

        self.model_info = model
        self.batch_size = batch_size
        self._model = SentenceTransformer(model.path, device="cpu", local_files_only=True)
        self._lock = threading.Lock()
        self.texts_embedded = 0  # tests assert a cached index embeds nothing

    @property
    def dimension(self) -> int:
        return int(self._model.get_sentence_embedding_dimension())

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:  # torch on 2 cores: one batch at a time is fastest and thread-safe
            self.texts_embedded += len(texts)
            vectors = self._model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        return np.asarray(vectors, dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()
