"""Version specs: ``pipelines/<version>.toml`` → a typed, hashed :class:`VersionSpec`.

A spec lists every parameter of one agent version explicitly. Its hash covers
the parameters *and the text of every prompt file it names*, so editing a
prompt makes a new version in the registry even when no number changed.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragtrack.errors import InputError, Problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FixedChunking(_Strict):
    """v1: fixed-size character windows (langchain's recursive splitter)."""

    strategy: Literal["fixed"]
    chunk_size: int = Field(gt=0)
    chunk_overlap: int = Field(ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> FixedChunking:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return self


class QAPairsChunking(_Strict):
    """v2: an LLM rewrites every section into self-contained Q&A pairs; pairs are indexed."""

    strategy: Literal["qa_pairs"]
    pairs_per_section: int = Field(gt=0, le=10)


class ParentChildChunking(_Strict):
    """v3+: small child sections are indexed, their enclosing parent section is returned.

    ``parent_level`` is the heading level whose sections are parents (2 = ``##``).
    Children are the sections below it, cut into windows of ``child_max_chars``.
    """

    strategy: Literal["parent_child"]
    parent_level: int = Field(ge=1, le=6)
    child_max_chars: int = Field(gt=0)
    child_overlap: int = Field(ge=0)


Chunking = Annotated[FixedChunking | QAPairsChunking | ParentChildChunking, Field(discriminator="strategy")]


class EmbeddingSpec(_Strict):
    model: str
    substitute: str | None = None
    batch_size: int = Field(default=32, gt=0)


class RetrievalSpec(_Strict):
    mode: Literal["dense", "bm25", "hybrid"]
    top_k: int = Field(gt=0, description="contexts handed to the generator")
    first_stage_k: int | None = Field(
        default=None, gt=0, description="index units (chunks or children) the reranker scores"
    )
    rrf_k: int = Field(default=60, gt=0)
    bm25_tokenizer: Literal["auto", "en", "zh"] = "auto"
    multi_query: int = Field(default=0, ge=0, le=8, description="query rewrites; 0 = off")

    @model_validator(mode="after")
    def _stage_sizes(self) -> RetrievalSpec:
        if self.first_stage_k is not None and self.first_stage_k < self.top_k:
            raise ValueError("first_stage_k must be at least top_k")
        return self


class RerankSpec(_Strict):
    """A cross-encoder (FlagEmbedding's reranker). ``substitute`` is used when ``model``
    cannot be loaded offline: another cross-encoder, or ``"none"`` to skip the stage."""

    model: str = "none"
    substitute: str | None = None

    @property
    def enabled(self) -> bool:
        return self.model != "none"


class TopicsSpec(_Strict):
    enabled: bool = False
    max_topics: int = Field(default=5, gt=0, le=20)


class LLMSpec(_Strict):
    """The LLM behind every agent-side step (answer, outline, rewrite, Q&A pairs, topics)."""

    model: str = "offline"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, gt=0)


class GenerationSpec(_Strict):
    strategy: Literal["direct", "outline"]
    max_sentences: int = Field(default=4, gt=0, description="extractive (offline) answers only")


class PromptsSpec(_Strict):
    """Prompt template files, relative to the spec file. Only the steps a version uses."""

    answer: str
    outline: str | None = None
    qa_pairs: str | None = None
    topics: str | None = None
    rewrite: str | None = None


class VersionInfo(_Strict):
    name: str
    description: str = ""


class VersionSpec(_Strict):
    version: VersionInfo
    chunking: Chunking
    embedding: EmbeddingSpec
    retrieval: RetrievalSpec
    rerank: RerankSpec = RerankSpec()
    topics: TopicsSpec = TopicsSpec()
    generation: GenerationSpec
    llm: LLMSpec = LLMSpec()
    prompts: PromptsSpec

    @model_validator(mode="after")
    def _steps_have_prompts(self) -> VersionSpec:
        needed = {
            "outline": self.generation.strategy == "outline",
            "qa_pairs": self.chunking.strategy == "qa_pairs",
            "topics": self.topics.enabled,
            "rewrite": self.retrieval.multi_query > 0,
        }
        missing = [k for k, used in needed.items() if used and getattr(self.prompts, k) is None]
        if missing:
            raise ValueError(f"prompts.{missing[0]} is required by this spec")
        if self.rerank.enabled and self.retrieval.first_stage_k is None:
            raise ValueError("retrieval.first_stage_k is required when rerank.model is set")
        return self


class LoadedSpec(BaseModel):
    """A validated spec plus the prompt texts it names, and its hash."""

    model_config = ConfigDict(frozen=True)

    path: str
    spec: VersionSpec
    prompts: dict[str, str]

    @property
    def name(self) -> str:
        return self.spec.version.name

    @property
    def hash(self) -> str:
        payload = {"spec": self.spec.model_dump(mode="json"), "prompts": self.prompts}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def prompt_hash(self, step: str) -> str:
        return hashlib.sha256(self.prompts[step].encode()).hexdigest()[:12]

    def with_llm(self, model: str | None) -> LoadedSpec:
        """The same spec run with another LLM (``--llm``): a different, separately hashed agent."""
        if model is None or model == self.spec.llm.model:
            return self
        llm = self.spec.llm.model_copy(update={"model": model})
        return self.model_copy(update={"spec": self.spec.model_copy(update={"llm": llm})})

    def params(self) -> dict[str, str]:
        """Flat ``section.key → value`` strings, as logged to MLflow."""
        flat: dict[str, str] = {}
        for section, values in self.spec.model_dump(mode="json").items():
            for key, value in values.items():
                if section == "prompts":
                    if value is not None:
                        flat[f"prompt.{key}"] = value
                        flat[f"prompt.{key}.hash"] = self.prompt_hash(key)
                else:
                    flat[f"{section}.{key}"] = str(value)
        flat["spec_hash"] = self.hash
        return flat


def resolve_spec_path(version: str, pipelines_dir: str | Path = "pipelines") -> Path:
    """``v5`` → ``pipelines/v5.toml``; a path to a ``.toml`` file is taken as-is."""
    candidate = Path(version)
    if candidate.suffix == ".toml":
        return candidate
    return Path(pipelines_dir) / f"{version}.toml"


def load_spec(version: str, pipelines_dir: str | Path = "pipelines", root: str | Path | None = None) -> LoadedSpec:
    """Load, validate and hash a version spec; every problem names the key path.

    Files the spec names must lie inside the spec's folder or the project
    ``root``: their text is logged to the tracking store, so a path such as
    ``/proc/self/environ`` or ``../../.env`` must never be read.
    """
    path = resolve_spec_path(version, pipelines_dir)
    if not path.is_file():
        available = sorted(p.stem for p in Path(pipelines_dir).glob("*.toml"))
        hint = f" (available: {', '.join(available)})" if available else ""
        raise InputError([Problem(str(path), f"version spec not found{hint}")])
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise InputError([Problem(str(path), f"bad TOML: {e}")]) from None
    raw.setdefault("version", {}).setdefault("name", path.stem)
    try:
        spec = VersionSpec.model_validate(raw)
    except ValidationError as e:
        raise InputError([_problem(str(path), err) for err in e.errors()]) from None

    prompts, problems = {}, []
    for step, rel in spec.prompts.model_dump().items():
        if rel is None:
            continue
        prompt_path = (path.parent / rel).resolve()
        allowed = [path.parent.resolve(), *([Path(root).resolve()] if root is not None else [])]
        if not any(prompt_path.is_relative_to(folder) for folder in allowed):
            where = " or ".join(str(folder) for folder in allowed)
            problems.append(Problem(str(path), f"{rel} is outside {where}", field=f"prompts.{step}"))
        elif not prompt_path.is_file():
            problems.append(Problem(str(path), f"prompt file not found: {prompt_path}", field=f"prompts.{step}"))
        else:
            prompts[step] = prompt_path.read_text(encoding="utf-8")
    if problems:
        raise InputError(problems)
    return LoadedSpec(path=str(path), spec=spec, prompts=prompts)


def _problem(file: str, err: dict) -> Problem:
    # Discriminated unions put the tag in the location ("chunking", "fixed", ...): drop it.
    loc = [str(x) for x in err["loc"] if x not in ("fixed", "qa_pairs", "parent_child")]
    kind = err["type"]
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing":
        msg = "required key is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
    return Problem(file, msg, field=".".join(loc) or None)
