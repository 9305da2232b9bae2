"""The parameters of ragtrack's own pipeline (agent kind ``pipeline``), and its strategy registries.

A pipeline spec lists every parameter explicitly: chunking, embedding,
retrieval, rerank, topics, generation, the LLM behind every step and the
prompt files. Each strategy name (chunking strategy, retrieval mode, rerank
kind, generation strategy) is looked up in a registry here; an unknown name
is an error at load time, never a silent fallback.

This module is light (pydantic only): the registries name their
implementations lazily.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragtrack.agent import AgentKind, VersionInfo
from ragtrack.registry import Registry
from ragtrack.text import template_problems

# Strategy name → implementation ("module:attribute", imported on first use).
RETRIEVAL_MODES: Registry = Registry(
    "retrieval mode",
    {
        "dense": "ragtrack.pipeline.retrieve:DenseSearch",
        "bm25": "ragtrack.pipeline.retrieve:BM25Search",
        "hybrid": "ragtrack.pipeline.retrieve:HybridSearch",
    },
)
RERANKERS: Registry = Registry("reranker", {"cross_encoder": "ragtrack.pipeline.rerank:CrossEncoderReranker"})
GENERATORS: Registry = Registry(
    "generation strategy",
    {
        "direct": "ragtrack.pipeline.generate:DirectGenerator",
        "outline": "ragtrack.pipeline.generate:OutlineGenerator",
    },
)


class _Strict(BaseModel):
    # strict: TOML has types, so `top_k = true` or "5" is a mistake to report, not a value to coerce
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FixedChunking(_Strict):
    """v1: fixed-size character windows over whole documents (langchain's recursive splitter)."""

    implementation: ClassVar[str] = "ragtrack.pipeline.chunking:fixed_units"
    strategy: Literal["fixed"]
    chunk_size: int = Field(gt=0)
    chunk_overlap: int = Field(ge=0)  # below chunk_size (VersionSpec checks it, to name the key's line)


class QAPairsChunking(_Strict):
    """v2: an LLM rewrites every section into self-contained Q&A pairs; pairs are indexed."""

    implementation: ClassVar[str] = "ragtrack.pipeline.qa_pairs:qa_units"
    strategy: Literal["qa_pairs"]
    pairs_per_section: int = Field(gt=0, le=10)


class ParentChildChunking(_Strict):
    """v3+: small child sections are indexed, their enclosing parent section is returned.

    ``parent_level`` is the heading level whose sections are parents (2 = ``##``).
    Children are the sections below it, cut into windows of ``child_max_chars``.
    Documents with no section that deep (heading-less text, JSONL documents) group
    consecutive passages into parents of at most ``flat_parent_chars``.
    """

    implementation: ClassVar[str] = "ragtrack.pipeline.chunking:parent_child_units"
    strategy: Literal["parent_child"]
    parent_level: int = Field(ge=1, le=6)
    child_max_chars: int = Field(gt=0)
    child_overlap: int = Field(ge=0)
    flat_parent_chars: int = Field(default=1500, gt=0)


# Strategy name → its parameter model (whose ``implementation`` names the code).
CHUNKING: Registry[type[_Strict]] = Registry(
    "chunking strategy",
    {"fixed": FixedChunking, "qa_pairs": QAPairsChunking, "parent_child": ParentChildChunking},
)
Chunking = Annotated[FixedChunking | QAPairsChunking | ParentChildChunking, Field(discriminator="strategy")]


class EmbeddingSpec(_Strict):
    """The embedder: a hub name, a local folder, a packaged model (``m3e-small``), or ``"none"`` for a
    version that embeds nothing (BM25 retrieval; offline answers then pick sentences by word overlap)."""

    model: str
    substitute: str | None = None
    batch_size: int = Field(default=32, gt=0)

    @property
    def enabled(self) -> bool:
        return self.model != "none"


class RetrievalSpec(_Strict):
    mode: str
    top_k: int = Field(gt=0, description="contexts handed to the generator")
    first_stage_k: int | None = Field(
        default=None, gt=0, description="index units (chunks or children) fetched before rerank / small-to-big"
    )
    child_fetch_factor: int = Field(
        default=4, gt=0, description="without first_stage_k, parent/child fetches top_k x this many children"
    )
    rrf_k: int = Field(default=60, gt=0)
    bm25_tokenizer: Literal["auto", "en", "zh"] = "auto"
    multi_query: int = Field(default=0, ge=0, le=8, description="query rewrites; 0 = off")
    prf_docs: int = Field(default=3, gt=0, description="offline rewrite: BM25 hits read for feedback words")
    prf_terms: int = Field(default=5, gt=0, description="offline rewrite: feedback words added")

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        return RETRIEVAL_MODES.check(value)

    @model_validator(mode="after")
    def _stage_sizes(self) -> RetrievalSpec:
        if self.first_stage_k is not None and self.first_stage_k < self.top_k:
            raise ValueError("first_stage_k must be at least top_k")
        return self


class RerankSpec(_Strict):
    """A cross-encoder (FlagEmbedding's reranker). ``substitute`` is used when ``model``
    cannot be loaded offline: another cross-encoder, or ``"none"`` to skip the stage."""

    model: str = "none"
    kind: str = "cross_encoder"
    substitute: str | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        return RERANKERS.check(value)

    @property
    def enabled(self) -> bool:
        return self.model != "none"


class TopicsSpec(_Strict):
    enabled: bool = False
    max_topics: int = Field(default=5, gt=0, le=20)


class StepTokens(_Strict):
    """``max_tokens`` of each LLM step: every request carries an explicit cap."""

    answer: int = Field(default=512, gt=0)
    qa_pairs: int = Field(default=512, gt=0)
    outline: int = Field(default=200, gt=0)
    rewrite: int = Field(default=200, gt=0)
    topics: int = Field(default=120, gt=0)


class LLMSpec(_Strict):
    """The LLM behind every agent-side step (answer, outline, rewrite, Q&A pairs, topics)."""

    model: str = "offline"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: StepTokens = StepTokens()

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _one_cap(cls, value: object) -> object:
        # ``max_tokens = 512`` (one number) caps the long-form steps, as it always has.
        return {"answer": value, "qa_pairs": value} if isinstance(value, int) else value


class GenerationSpec(_Strict):
    strategy: str
    max_sentences: int = Field(default=4, gt=0, description="extractive (offline) answers only")
    # The answer cites its numbered contexts ([1], [2]…): offline, each extracted sentence is marked with
    # the context it came from; with an LLM, the answer prompt must ask for the markers (see
    # prompts/answer_cited.md). Scored by the citation figures. Left out of the spec's dump while false.
    cite: bool = Field(default=False, exclude_if=lambda v: not v)

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        return GENERATORS.check(value)


#: Step → (the placeholders its prompt must hold, the others it fills): what each step's ``messages``
#: renders its prompt with. A prompt without a needed one would have the model answer without that input.
PROMPT_PLACEHOLDERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "answer": (("question", "contexts"), ("outline",)),
    "outline": (("question", "topics"), ()),
    "qa_pairs": (("text",), ("title", "n")),
    "topics": (("text",), ("n",)),
    "rewrite": (("question",), ("n",)),
}


class PromptsSpec(_Strict):
    """Prompt template files, relative to the spec file. Only the steps a version uses."""

    answer: str
    outline: str | None = None
    qa_pairs: str | None = None
    topics: str | None = None
    rewrite: str | None = None


class PipelineTable(_Strict):
    kind: Literal["pipeline"] = "pipeline"


class VersionSpec(_Strict):
    version: VersionInfo
    agent: PipelineTable = PipelineTable()
    chunking: Chunking
    embedding: EmbeddingSpec
    retrieval: RetrievalSpec
    rerank: RerankSpec = RerankSpec()
    topics: TopicsSpec = TopicsSpec()
    generation: GenerationSpec
    llm: LLMSpec = LLMSpec()
    prompts: PromptsSpec

    @model_validator(mode="after")
    def _consistent(self) -> VersionSpec:
        # Each message starts with the key that asks for what is missing: the error names its line.
        needed = {
            "outline": ("generation.strategy", self.generation.strategy == "outline"),
            "qa_pairs": ("chunking.strategy", self.chunking.strategy == "qa_pairs"),
            "topics": ("topics.enabled", self.topics.enabled),
            "rewrite": ("retrieval.multi_query", self.retrieval.multi_query > 0),
        }
        for prompt, (key, used) in needed.items():
            if used and getattr(self.prompts, prompt) is None:
                raise ValueError(f"{key}: needs prompts.{prompt} (a prompt file under [prompts])")
        if self.rerank.enabled and self.retrieval.first_stage_k is None:
            raise ValueError("rerank.model: needs retrieval.first_stage_k (the pool the reranker reorders)")
        c = self.chunking
        if isinstance(c, FixedChunking) and c.chunk_overlap >= c.chunk_size:
            raise ValueError(f"chunking.chunk_overlap: must be smaller than chunk_size ({c.chunk_size})")
        return self


def _prompt_files(spec: VersionSpec) -> dict[str, str]:
    return {step: rel for step, rel in spec.prompts.model_dump().items() if rel is not None}


def _check_prompts(spec: VersionSpec, texts: dict[str, str]) -> dict[str, str]:
    """Step → why its prompt text would not show the model that step's inputs (see PROMPT_PLACEHOLDERS)."""
    out = {}
    for step, text in texts.items():
        needs, others = PROMPT_PLACEHOLDERS[step]
        if step == "answer" and spec.generation.strategy == "outline":  # else the outline is drafted, unused
            needs, others = (*needs, "outline"), ()
        if problems := template_problems(text, step, needs, (*needs, *others)):
            takes = ", ".join(f"{{{{{name}}}}}" for name in (*needs, *others))
            out[step] = f"{'; '.join(problems)}; the {step} step takes {takes}"
    return out


def _build(spec, ctx):
    from ragtrack.pipeline.agent import PipelineAgent

    return PipelineAgent(spec, ctx)


KIND = AgentKind("pipeline", VersionSpec, _build, _prompt_files, check_files=_check_prompts)
