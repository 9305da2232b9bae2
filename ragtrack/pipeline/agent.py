"""An agent version assembled from its spec: index once (cached), then answer questions.

    question → [rewrite] → retrieve (dense | bm25 | hybrid) → [small→big parents]
             → [rerank] → top-k contexts → [outline from topics] → answer

Each stage is a module of its own; this one only wires them as the spec says
and records what was actually used (models, substitutions, offline steps).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ragtrack.corpus import Corpus
from ragtrack.llm.client import LLM
from ragtrack.pipeline.chunking import Chunk, fixed_chunks, parent_child_chunks
from ragtrack.pipeline.embedding import Embedder
from ragtrack.pipeline.generate import AnswerInput, AnswerStep, OutlineInput, OutlineStep
from ragtrack.pipeline.index import BM25Index, DenseIndex, cache_key, load_index, save_index
from ragtrack.pipeline.models import ResolvedModel, resolve_model
from ragtrack.pipeline.qa_pairs import QA_SCHEMA, QAPairsStep, qa_chunks
from ragtrack.pipeline.rerank import CrossEncoderReranker, Reranker, rerank
from ragtrack.pipeline.retrieve import Retriever
from ragtrack.pipeline.rewrite import REWRITE_SCHEMA, RewriteStep
from ragtrack.pipeline.topics import TOPICS_SCHEMA, TopicsStep
from ragtrack.spec import LoadedSpec
from ragtrack.text import document_frequencies, keywords

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetrievedContext:
    unit_id: str
    text: str
    score: float
    passage_ids: tuple[str, ...]


@dataclass
class AgentOutput:
    question: str
    answer: str
    contexts: list[RetrievedContext]
    queries: list[str] = field(default_factory=list)
    outline: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def retrieved_unit_ids(self) -> list[str]:
        return [c.unit_id for c in self.contexts]

    @property
    def retrieved_passage_ids(self) -> list[str]:
        """Canonical IDs in rank order, each at the first position it appears."""
        return list(dict.fromkeys(pid for c in self.contexts for pid in c.passage_ids))


@dataclass
class IndexStats:
    chunks: int
    parents: int
    from_cache: bool
    key: str


class Agent:
    """One version of the RAG agent, ready to answer."""

    def __init__(
        self,
        spec: LoadedSpec,
        corpus: Corpus,
        llm: LLM,
        *,
        cache_dir: Path,
        min_overlap: float = 0.5,
        embedder: Embedder | None = None,
    ):
        s = spec.spec
        self.spec, self.corpus, self.llm, self.min_overlap = spec, corpus, llm, min_overlap
        self.embedding_model = resolve_model(s.embedding.model, s.embedding.substitute, "embedding")
        # Resolve the reranker before any work, so a missing model fails fast.
        self.rerank_model: ResolvedModel | None = (
            resolve_model(s.rerank.model, s.rerank.substitute, "rerank") if s.rerank.enabled else None
        )
        self.embedder = embedder or Embedder(self.embedding_model, s.embedding.batch_size)
        self.language = corpus.language if s.retrieval.bm25_tokenizer == "auto" else s.retrieval.bm25_tokenizer
        df, n_docs = document_frequencies(p.text for p in corpus.passages.values())
        self._df, self._n_docs = df, n_docs

        self.answer_step = AnswerStep(
            "answer",
            spec.prompts["answer"],
            max_tokens=s.llm.max_tokens,
            temperature=s.llm.temperature,
            embedder=self.embedder,
            max_sentences=s.generation.max_sentences,
        )
        self.outline_step = (
            OutlineStep(
                "outline",
                spec.prompts["outline"],
                max_tokens=200,
                temperature=s.llm.temperature,
                embedder=self.embedder,
            )
            if s.generation.strategy == "outline"
            else None
        )
        self.chunks, self.parents, self.index_stats, self.dense = self._load_or_build_index(cache_dir)
        self.bm25 = BM25Index(list(self.chunks.values()), self.language) if s.retrieval.mode != "dense" else None
        self.retriever = Retriever(s.retrieval.mode, self.dense, self.bm25, s.retrieval.rrf_k)
        self.rewrite_step = (
            RewriteStep(
                "rewrite",
                spec.prompts["rewrite"],
                max_tokens=200,
                temperature=s.llm.temperature,
                json_schema=REWRITE_SCHEMA,
                n=s.retrieval.multi_query,
                expand=self._prf_words,
            )
            if s.retrieval.multi_query
            else None
        )
        self.reranker = self._make_reranker()

    # ---------------------------------------------------------------- indexing
    def _index_key(self) -> str:
        s = self.spec.spec
        llm_steps = {}
        if s.chunking.strategy == "qa_pairs":
            llm_steps["qa_pairs"] = self.spec.prompt_hash("qa_pairs")
        if s.topics.enabled:
            llm_steps["topics"] = (self.spec.prompt_hash("topics"), s.topics.max_topics)
        return cache_key(
            self.corpus.digest,
            s.chunking.model_dump(),
            self.embedding_model.used,
            self.min_overlap,
            (self.llm.identity, llm_steps) if llm_steps else None,
            "v1",  # bump when the on-disk layout changes
        )

    def _load_or_build_index(self, cache_dir: Path):
        key = self._index_key()
        folder = cache_dir / "index" / key
        need_dense = self.spec.spec.retrieval.mode != "bm25"
        cached = load_index(folder, self.embedder, need_dense)
        if cached is not None:
            chunks, parents, dense = cached
            return chunks, parents, IndexStats(len(chunks), len(parents), True, key), dense

        chunks, parents, complete = self._build_units()
        dense = DenseIndex.build(list(chunks.values()), self.embedder) if need_dense else None
        if complete:
            save_index(folder, chunks, parents, dense)
        else:
            log.warning("some index-time LLM steps failed; the index is not cached (the LLM cache keeps the rest)")
        return chunks, parents, IndexStats(len(chunks), len(parents), False, key), dense

    def _build_units(self) -> tuple[dict[str, Chunk], dict[str, Chunk], bool]:
        s = self.spec.spec
        c = s.chunking
        failures_before = self.llm.accounting.summary(self.llm.model_name).get("total", {}).get("failed", 0)
        parents: dict[str, Chunk] = {}
        if c.strategy == "fixed":
            chunks = fixed_chunks(self.corpus, c.chunk_size, c.chunk_overlap, self.min_overlap)
        elif c.strategy == "qa_pairs":
            step = QAPairsStep(
                "qa_pairs",
                self.spec.prompts["qa_pairs"],
                max_tokens=s.llm.max_tokens,
                temperature=s.llm.temperature,
                json_schema=QA_SCHEMA,
                pairs_per_section=c.pairs_per_section,
            )
            chunks = qa_chunks(self.corpus, self.llm, step)
        else:
            chunks, parents = parent_child_chunks(
                self.corpus, c.parent_level, c.child_max_chars, c.child_overlap, self.min_overlap
            )
        if s.topics.enabled:
            step = TopicsStep(
                "topics",
                self.spec.prompts["topics"],
                max_tokens=120,
                temperature=s.llm.temperature,
                json_schema=TOPICS_SCHEMA,
                max_topics=s.topics.max_topics,
                document_frequency=self._df,
                n_docs=self._n_docs,
            )
            targets = parents or {ch.id: ch for ch in chunks}
            results = self.llm.map(step, list(targets.values()))
            for unit, result in zip(list(targets.values()), results, strict=True):
                targets[unit.id] = Chunk(
                    **{**asdict(unit), "metadata": {**unit.metadata, "topics": list(result.value or ())}}
                )
            if not parents:
                chunks = list(targets.values())
        failures = self.llm.accounting.summary(self.llm.model_name).get("total", {}).get("failed", 0)
        return {ch.id: ch for ch in chunks}, parents, failures == failures_before

    # ---------------------------------------------------------------- querying
    def _prf_words(self, question: str) -> list[str]:
        """Pseudo-relevance feedback: distinctive words of the top-3 BM25 hits."""
        if self.bm25 is None:
            return []
        top = [self.chunks[cid].text for cid, _ in self.bm25.search(question, 3)]
        return keywords(" ".join(top), 5, self._df, self._n_docs)

    def _make_reranker(self) -> Reranker | None:
        m = self.rerank_model
        return CrossEncoderReranker(m) if m is not None and m.used != "none" else None

    def _context_unit(self, chunk_id: str) -> Chunk:
        chunk = self.chunks[chunk_id]
        return self.parents[chunk.parent_id] if chunk.parent_id else chunk

    def answer(self, question: str) -> AgentOutput:
        s = self.spec.spec
        errors: list[str] = []
        queries = [question]
        if self.rewrite_step is not None:
            rewritten = self.llm.run(self.rewrite_step, question)
            if rewritten.ok:
                queries += [q for q in rewritten.value if q != question]
            else:
                errors.append(f"rewrite: {rewritten.error}")

        if self.reranker is not None:
            # Wide first stage over index units, rerank the units themselves (small texts fit the
            # cross-encoder's window), then return their context units in reranked order.
            candidates = self.retriever.search_many(queries, s.retrieval.first_stage_k)
            texts = [(cid, self.chunks[cid].text) for cid, _ in candidates]
            ranked_units = rerank(self.reranker, question, texts, len(texts))
        else:
            # Children are small: fetch more of them so enough distinct parents remain.
            fetch = s.retrieval.first_stage_k or (s.retrieval.top_k * 4 if self.parents else s.retrieval.top_k)
            ranked_units = self.retriever.search_many(queries, fetch)
        best: dict[str, float] = {}
        for chunk_id, score in ranked_units:
            best.setdefault(self._context_unit(chunk_id).id, score)
        contexts = [
            RetrievedContext(uid, self._unit(uid).text, score, self._unit(uid).passage_ids)
            for uid, score in list(best.items())[: s.retrieval.top_k]
        ]

        outline: tuple[str, ...] = ()
        if self.outline_step is not None:
            topics = tuple(tuple(self._unit(c.unit_id).metadata.get("topics", ())) for c in contexts)
            result = self.llm.run(self.outline_step, OutlineInput(question, topics))
            if result.ok:
                outline = result.value
            else:
                errors.append(f"outline: {result.error}")

        result = self.llm.run(self.answer_step, AnswerInput(question, tuple(c.text for c in contexts), outline))
        if not result.ok:
            errors.append(f"answer: {result.error}")
        return AgentOutput(
            question=question,
            answer=result.value or "",
            contexts=contexts,
            queries=queries,
            outline=list(outline),
            errors=errors,
        )

    def _unit(self, unit_id: str) -> Chunk:
        return self.parents.get(unit_id) or self.chunks[unit_id]

    # ---------------------------------------------------------------- reporting
    @property
    def substituted(self) -> bool:
        return self.embedding_model.substituted or bool(self.rerank_model and self.rerank_model.substituted)

    def describe(self) -> dict[str, str]:
        """What actually runs, beyond the spec: models used, offline steps, index size."""
        s = self.spec.spec
        offline = self.llm.is_offline
        out = {
            "llm": self.llm.identity,
            "generator": "extractive (offline, no LLM)" if offline else f"llm:{self.llm.identity}",
            "embedding_model_requested": self.embedding_model.requested,
            "embedding_model": self.embedding_model.used,
            "bm25_tokenizer": self.language if s.retrieval.mode != "dense" else "n/a",
            "index_chunks": str(self.index_stats.chunks),
            "index_parents": str(self.index_stats.parents),
            "index_key": self.index_stats.key,
            "substituted": str(self.substituted).lower(),
        }
        if self.rerank_model is not None:
            out["rerank_model_requested"] = self.rerank_model.requested
            out["rerank_model"] = self.rerank_model.used
        steps = {
            "qa_pairs": s.chunking.strategy == "qa_pairs",
            "topics": s.topics.enabled,
            "outline": s.generation.strategy == "outline",
            "rewrite": s.retrieval.multi_query > 0,
        }
        for step, used in steps.items():
            if used:
                out[f"step.{step}"] = "offline (deterministic)" if offline else f"llm:{self.llm.identity}"
        return out
