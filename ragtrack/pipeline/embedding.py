"""Sentence embeddings, loaded offline through sentence-transformers.

sentence-transformers reads the pooling and normalisation a model was trained
with from its own folder (mean pooling for MiniLM, CLS for bge), which a bare
transformers or FlagModel loader would have to be told by hand.

The model is loaded on the first text that must be encoded, not before:
importing sentence-transformers (torch, transformers) takes seconds, and an
eval whose index and query vectors are all cached encodes nothing. Once loaded,
it stays loaded for the process (:func:`shared_model`, keyed by model folder
and device): every agent of a version, and every ``evaluate()`` of a session or
a notebook, encodes with the one copy instead of reading the weights again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from langchain_core.embeddings import Embeddings

from ragtrack.heartbeat import heartbeat
from ragtrack.pipeline.models import ResolvedModel
from ragtrack.pipeline.vector_cache import VectorCache

# A large encode reports progress every this many batches (8 × 32 texts: a few seconds on 2 cores).
PROGRESS_BATCHES = 8

DEVICE = "cpu"  # ragtrack's runs are reproducible on any machine: no GPU-dependent vectors

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


@dataclass(frozen=True)
class LoadedModel:
    """A loaded sentence-transformers model and the lock every user of it encodes under: the fast
    tokenizers it calls are not safe to share between threads ("Already borrowed")."""

    model: SentenceTransformer
    lock: threading.Lock


_LOADED: dict[tuple[str, str], LoadedModel] = {}
_LOADING = threading.Lock()


def shared_model(path: str, device: str = DEVICE) -> LoadedModel:
    """The process's one loaded copy of the model in folder ``path`` on ``device``. Weights on disk
    are read-only to ragtrack, so a copy loaded once stays right for the life of the process."""
    key = (path, device)
    with _LOADING:
        if key not in _LOADED:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(path, device=device, local_files_only=True)
            _LOADED[key] = LoadedModel(model, threading.Lock())
        return _LOADED[key]


class Embedder(Embeddings):
    """A langchain ``Embeddings`` over a local sentence-transformers model, counting its work."""

    remembers = True  # vectors are worth computing once, at index time, and keeping beside the index

    def __init__(
        self,
        model: ResolvedModel,
        batch_size: int = 32,
        remember: int = 50_000,
        on_stage: Callable[[str], None] | None = None,
    ):
        """``on_stage(message)`` hears what takes seconds: the model loading, and the progress of a large
        encode (an index build), so a first run is never silent for long."""
        self.model_info = model
        self._on_stage = on_stage
        self.batch_size = batch_size
        self._model: LoadedModel | None = None  # see _loaded()
        self._width: int | None = None  # of the vectors it was told (know()), while the model is not loaded
        self._lock = threading.RLock()
        # Each text is encoded once: vectors known from the index (sentences, topics) plus the most
        # recent query-time texts (questions, rewrites, outline points).
        self._known: dict[str, np.ndarray] = {}
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._remember = remember
        self.cache: VectorCache | None = None  # vectors kept between runs, once attached
        self.texts_embedded = 0  # tests assert a cached index embeds nothing
        self.encode_calls = 0

    @property
    def dimension(self) -> int:
        if self._model is None and self._width is not None:
            return self._width
        model = self._loaded().model
        # Newer sentence-transformers renamed the method (the old name warns); older ones know only that.
        named = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(named())

    @property
    def loaded(self) -> bool:
        """Whether the model was needed so far (tests assert a fully cached eval never loads it)."""
        return self._model is not None

    def _loaded(self) -> LoadedModel:
        with self._lock:
            if self._model is None:
                loading = (self.model_info.path, DEVICE) not in _LOADED
                if self._on_stage is not None and loading:
                    self._on_stage(
                        f"loading the embedding model {self.model_info.used} (once per process; seconds, or minutes "
                        "on a busy machine)"
                    )
                with heartbeat(
                    self._on_stage if loading else None, f"loading the embedding model {self.model_info.used}"
                ):
                    self._model = shared_model(self.model_info.path)
            return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text; texts seen before are not encoded again."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:  # torch on 2 cores: one batch at a time is fastest and thread-safe
            missing = [t for t in dict.fromkeys(texts) if t not in self._known and t not in self._recent]
            if missing and self.cache is not None:
                kept = self.cache.get(missing)
                self._recent.update(kept)
                missing = [t for t in missing if t not in kept]
            if missing:
                self.texts_embedded += len(missing)
                self.encode_calls += 1
                vectors = self._encode(missing)
                self._recent.update(zip(missing, vectors, strict=True))
                if self.cache is not None:
                    self.cache.put(missing, vectors)
            rows = []
            for text in texts:
                if text in self._known:
                    rows.append(self._known[text])
                else:
                    self._recent.move_to_end(text)
                    rows.append(self._recent[text])
            while len(self._recent) > self._remember:
                self._recent.popitem(last=False)
        return np.stack(rows)

    def _encode(self, texts: list[str]) -> np.ndarray:
        """The model's vectors for ``texts``; past a few batches, in slices that each report progress."""
        model = self._loaded()
        step = self.batch_size * PROGRESS_BATCHES
        if self._on_stage is None or len(texts) <= step:
            slices = [texts]
        else:
            slices = [texts[start : start + step] for start in range(0, len(texts), step)]
        parts, done = [], 0
        # A slice takes seconds on a quiet machine and can take far longer on a busy one: the heartbeat
        # keeps the terminal from going silent between two progress lines (a question's own few texts
        # are not worth its thread).
        say = self._on_stage if len(texts) > self.batch_size else None
        if say is not None:  # the model's loading said its own lines: this one starts the encode's clock
            say(f"embedding {len(texts)} texts: 0/{len(texts)}")
        with heartbeat(say, f"embedding {len(texts)} texts"):
            for part in slices:
                with model.lock:
                    vectors = model.model.encode(
                        part, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
                    )
                parts.append(np.asarray(vectors, dtype=np.float32))
                done += len(part)
                if len(slices) > 1:
                    self._on_stage(f"embedding {len(texts)} texts: {done}/{len(texts)}")
        return np.concatenate(parts)

    def forget_recent(self) -> None:
        """Drop the query-time vectors (a benchmark times each retriever with its own query encodes)."""
        with self._lock:
            self._recent.clear()

    def know(self, texts: list[str], vectors: np.ndarray) -> None:
        """Vectors computed earlier (stored beside an index): encode() answers them without the model."""
        with self._lock:
            vectors = np.asarray(vectors, dtype=np.float32)
            self._known.update(zip(texts, vectors, strict=True))
            if vectors.ndim == 2 and len(vectors):
                self._width = vectors.shape[1]
            for text in texts:  # just encoded at index build: known now, no longer taking room among the recent
                self._recent.pop(text, None)

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
    remembers = False  # computing a vector is cheaper than storing 4096 floats per sentence

    def __init__(self) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        from ragtrack.text import overlap_units

        self._vectorizer = HashingVectorizer(
            analyzer=lambda text: sorted(overlap_units(text)), n_features=self.dimension, alternate_sign=False
        )

    def forget_recent(self) -> None:
        """Nothing remembered, nothing to forget (see ``remembers``)."""

    def know(self, texts: list[str], vectors: np.ndarray) -> None:
        """Nothing to remember (see ``remembers``)."""

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._vectorizer.transform(texts).toarray().astype(np.float32)
