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


class LexicalEmbedder:
    """Bag-of-units vectors for versions that embed nothing (``embedding.model = "none"``).

    BM25-only versions still pick answer sentences offline by closeness to the
    question; without an embedder for the corpus's language, closeness is word
    overlap: stemmed English content words or Chinese character bigrams
    (:func:`ragtrack.text.overlap_units`), hashed by scikit-learn into a fixed
    number of dimensions and scaled to unit length, so cosine is overlap.
    """

    dimension = 4096
    model_info = None
    texts_embedded = 0

    def __init__(self) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        from ragtrack.text import overlap_units

        self._vectorizer = HashingVectorizer(
            analyzer=lambda text: sorted(overlap_units(text)), n_features=self.dimension, alternate_sign=False
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._vectorizer.transform(texts).toarray().astype(np.float32)
