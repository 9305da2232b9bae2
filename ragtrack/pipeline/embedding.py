"""Sentence embeddings, loaded offline through sentence-transformers.

sentence-transformers reads the pooling and normalisation a model was trained
with from its own folder (mean pooling for MiniLM, CLS for bge), which a bare
transformers or FlagModel loader would have to be told by hand.

The model is loaded on the first text that must be encoded, not before:
importing sentence-transformers (torch, transformers) takes seconds, and an
eval whose index and text vectors are all cached encodes nothing. Once loaded,
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

    remembers = True  # vectors are worth computing once and keeping, in memory and in the vector cache

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
        self._lock = threading.RLock()
        # Each text is encoded once: the vectors of the index's units' texts (sentences, topics: see
        # encode's ``keep``), kept for the embedder's life, plus the most recent query-time texts
        # (questions, rewrites, outline points).
        self._kept: dict[str, np.ndarray] = {}
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._remember = remember
        self.cache: VectorCache | None = None  # vectors kept between runs, once attached
        self.texts_embedded = 0  # tests assert a cached index embeds nothing
        self.encode_calls = 0

    @property
    def dimension(self) -> int:
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

    def encode(self, texts: list[str], keep: bool = False) -> np.ndarray:
        """Unit-length float32 vectors, one row per text; texts seen before are not encoded again.

        ``keep``: ``texts`` are of the index's units (the sentences and topics offline generation
        compares a question with), encoded when a question first retrieves their unit and kept for
        the embedder's life: never dropped by :meth:`forget_recent` nor among the ``remember`` most
        recent, so a unit's texts are encoded (or read from the cache) once per process."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:  # torch on 2 cores: one batch at a time is fastest and thread-safe
            missing = [t for t in dict.fromkeys(texts) if t not in self._kept and t not in self._recent]
            found = self.cache.get(missing) if missing and self.cache is not None else {}
            missing = [t for t in missing if t not in found]
            if missing:
                self.texts_embedded += len(missing)
                self.encode_calls += 1
                vectors = self._encode(missing, quiet=keep)
                found.update(zip(missing, vectors, strict=True))
                if self.cache is not None:
                    self.cache.put(missing, vectors)
            if keep:
                self._kept.update(found)
                for text in texts:  # met as a query first, a unit's text now: kept from now on
                    if text in self._recent:
                        self._kept[text] = self._recent.pop(text)
            else:
                self._recent.update(found)
            rows = []
            for text in texts:
                if text in self._kept:
                    rows.append(self._kept[text])
                else:
                    self._recent.move_to_end(text)
                    rows.append(self._recent[text])
            while len(self._recent) > self._remember:
                self._recent.popitem(last=False)
        return np.stack(rows)

    def _encode(self, texts: list[str], quiet: bool = False) -> np.ndarray:
        """The model's vectors for ``texts``; past a few batches, in slices that each report progress
        (unless ``quiet``: a question's texts, its retrieved units' sentences included, whose progress
        is the eval's own)."""
        model = self._loaded()
        step = self.batch_size * PROGRESS_BATCHES
        # A slice takes seconds on a quiet machine and can take far longer on a busy one: the heartbeat
        # keeps the terminal from going silent between two progress lines (a question's own few texts
        # are not worth its thread).
        say = self._on_stage if len(texts) > self.batch_size and not quiet else None
        if say is None or len(texts) <= step:
            slices = [texts]
        else:
            slices = [texts[start : start + step] for start in range(0, len(texts), step)]
        parts, done = [], 0
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
        """Drop the query-time vectors, not the kept ones (a benchmark times each retriever with its
        own query encodes)."""
        with self._lock:
            self._recent.clear()

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

    def encode(self, texts: list[str], keep: bool = False) -> np.ndarray:
        """``keep`` is for the interface's sake: nothing is remembered (see ``remembers``)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._vectorizer.transform(texts).toarray().astype(np.float32)
