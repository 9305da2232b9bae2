"""The agent port: what evaluation needs of an agent under test, whatever it is built on.

An agent has an identity (its version name, its kind, the parameters MLflow
logs, a content hash) and answers one question at a time with the answer and
the ranked contexts it retrieved — each mapped to the canonical passage IDs
of the corpus, so that every agent, built in or external, is scored against
one golden set.

Kinds of agent are a registry: ``pipeline`` is ragtrack's own pipeline built
from a TOML spec; a new kind is one module that defines an :class:`AgentKind`
plus one line here (or one call to ``AGENT_KINDS.add`` from user code).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragtrack.citation_markers import style
from ragtrack.llm.accounting import Usage
from ragtrack.records import ranked_passage_ids
from ragtrack.registry import Registry

if TYPE_CHECKING:
    from ragtrack.config import ProjectConfig
    from ragtrack.corpus import Corpus
    from ragtrack.golden import Turn
    from ragtrack.llm.client import LLM
    from ragtrack.spec import LoadedSpec


@dataclass(frozen=True)
class AgentIdentity:
    name: str  # the version name: "v5", "dify-app-v6"
    kind: str  # an AGENT_KINDS name: "pipeline", "dify", ...
    params: dict[str, str]  # logged as MLflow params and model params
    hash: str  # changes whenever anything in the spec that can change an answer changes
    # What selects the answers outside the spec: a digest of the key that picks a Dify app (one base URL
    # serves every app of a Dify; the key is the app). Keys the reply cache and resuming; never logged.
    runtime: str = ""


@dataclass(frozen=True)
class RetrievedContext:
    """One unit the agent retrieved and handed to its generator, mapped to canonical passages."""

    unit_id: str  # the agent's own ID: a chunk, a Q&A pair, a platform segment
    text: str
    passage_ids: tuple[str, ...]
    score: float | None = None
    mapping: str = "span"  # how passage_ids were found (see records.ContextRecord)


#: What a stage of answering is, in the span vocabulary GenAI tracing shares (OpenInference, MLflow):
#: a trace shows each stage as a span of that kind.
STAGE_KINDS: Registry[str] = Registry(
    "stage kind",
    {
        "retriever": "finds ranked contexts for the question",
        "reranker": "reorders retrieved contexts",
        "llm": "one language-model step (or its offline stand-in): rewrite, outline, answer",
        "chain": "any other step",
        "agent": "a whole call to an agent that reports no stages of its own",
    },
)


#: The part a stage (a workflow's node, a pipeline's step) plays in answering: node metrics score each
#: role, and an item's first failing node is looked for in FLOW order.
NODE_ROLES: Registry[str] = Registry(
    "node role",
    {
        "rewrite": "rewrites the question into the query retrieval reads",
        "intent": "classifies the question, routing it to a knowledge base",
        "retrieval": "retrieves contexts for the query",
        "rerank": "reorders retrieved contexts",
        "generation": "writes the answer from the contexts it received",
    },
)
#: The order a question flows through the roles: a wrong route makes everything after it wasted.
FLOW = ("rewrite", "intent", "retrieval", "generation")


@dataclass(frozen=True)
class Stage:
    """One timed step of answering a question, as the agent ran it.

    Times are wall-clock nanoseconds (``time.time_ns()``) so that a trace can
    place the step; ``contexts`` are the units a retriever or reranker stage
    returned, in rank order; ``inputs`` and ``outputs`` are small JSON-able
    values worth seeing (the queries, an outline), not the contexts again.
    """

    name: str
    kind: str  # a STAGE_KINDS name
    start_ns: int
    end_ns: int
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    contexts: tuple[RetrievedContext, ...] = ()
    #: The node behind this stage: its ``role`` (a NODE_ROLES name) and ``role_from`` (why), and what a
    #: workflow platform said of it (id, type, title, index, status, error, elapsed_s, tokens).
    node: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        STAGE_KINDS.check(self.kind)


@dataclass
class AgentOutput:
    answer: str
    contexts: list[RetrievedContext]  # in rank order
    queries: list[str] = field(default_factory=list)
    outline: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a failed step: recorded on the item, never raised
    usage: dict[str, Usage] = field(default_factory=dict)  # what this answer cost, per step
    #: False when the reply did not say what was retrieved (a Dify app without citations, a failed
    #: call): the item gets no retrieval metrics — never a silent recall of 0 — and ``errors`` says why.
    retrieval_reported: bool = True
    stages: list[Stage] = field(default_factory=list)  # how it was produced, when the agent can say
    #: False when there is no answer to judge: the agent could not be asked, its reply could not be
    #: read, or its answer step failed (``errors`` says why). The item is not judged — a failed call
    #: is not a wrong answer — and an eval that resumes asks it again.
    answered: bool = True
    #: True for an agent that retrieves and does not answer (a platform's ``retrieval_only``): the
    #: item gets retrieval metrics and no judge verdicts (there is no answer to judge).
    retrieval_only: bool = False
    #: An answer that cites its contexts: the marker styles it uses (:data:`ragtrack.evaluation.citations.STYLES`)
    #: and the answer as written, markers and all; ``answer`` is what a reader (and a judge) sees, without them.
    cite_styles: tuple[str, ...] = ()
    cited_answer: str = ""

    @property
    def passage_ids(self) -> list[str]:
        """Canonical IDs in rank order; an unmapped context takes its rank as ``unmapped:<unit id>``."""
        return ranked_passage_ids(self.contexts)

    def to_json(self) -> dict:
        """Everything the output says, as JSON values: how an answer made in another process (a Spark
        executor) reaches the scoring of this one unchanged (:meth:`from_json` reads it back)."""
        data = asdict(self)
        data["usage"] = {step: u.to_json() for step, u in self.usage.items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> AgentOutput:
        def context(c: dict) -> RetrievedContext:
            return RetrievedContext(**{**c, "passage_ids": tuple(c["passage_ids"])})

        stages = [Stage(**{**s, "contexts": tuple(context(c) for c in s["contexts"])}) for s in data["stages"]]
        return cls(
            **{
                **data,
                "contexts": [context(c) for c in data["contexts"]],
                "usage": {step: Usage.from_json(u) for step, u in data["usage"].items()},
                "stages": stages,
            }
        )


def turns_json(history: Sequence[Turn]) -> list[dict[str, str]]:
    """The turns as JSON values, as a trace shows them and an HTTP or Python agent receives them."""
    return [{"role": t.role, "content": t.content} for t in history]


def transcript(history: Sequence[Turn]) -> str:
    """The turns as one text, a line ``user: …`` or ``assistant: …`` each (for a prompt or an input
    variable that reads the conversation as text)."""
    return "\n".join(f"{t.role}: {t.content}" for t in history)


def answer_timed(agent: Agent, question: str, history: Sequence[Turn] = ()) -> AgentOutput:
    """``agent.answer(question, history)``; an agent that reports no stages gets one ``agent`` stage for
    the whole call."""
    start = time.time_ns()
    # A lone question is asked as agents written before follow-ups existed take it: answer(question).
    output = agent.answer(question, history) if history else agent.answer(question)
    if not output.stages:
        output.stages = [
            Stage(
                "answer",
                "agent",
                start,
                time.time_ns(),
                inputs={"question": question, **({"history": turns_json(history)} if history else {})},
                outputs={"answer": output.answer},
                contexts=tuple(output.contexts),
            )
        ]
    return output


@dataclass
class Setup:
    """What getting the agent ready did in this process (building or loading an index, say)."""

    summary: str = ""  # shown to the user: "index from cache", "index built", ""
    from_cache: bool = False
    usage: dict[str, Usage] = field(default_factory=dict)  # LLM work it took (e.g. index-time steps)
    # What the user must know about how this agent will run: short code → sentence (a substituted
    # model, an embedder that does not read the corpus's language). Printed and tagged on the run.
    warnings: dict[str, str] = field(default_factory=dict)


class Agent(Protocol):
    """An agent under test."""

    identity: AgentIdentity
    #: Questions worth answering at once (1 for CPU-bound local work; an endpoint's concurrency).
    max_concurrency: int
    #: A model the spec names was replaced by a declared substitute.
    substituted: bool
    #: How many contexts the agent hands its generator, when it says (the rank metrics' cut-off);
    #: None: as many as each answer returned.
    top_k: int | None
    setup: Setup

    @property
    def peak_in_flight(self) -> int:
        """The most requests it had in flight at once (0 when it makes none)."""
        ...

    def answer(self, question: str, history: Sequence[Turn] = ()) -> AgentOutput:
        """Answer ``question``; ``history`` holds the conversation's earlier turns when it is a follow-up."""
        ...

    def abandon(self) -> None:
        """The eval stopped (interrupted, or the endpoint kept failing): end work in flight instead of
        waiting for it (a platform's running chats are cancelled). Answers still asked may fail."""
        ...

    def describe(self) -> dict[str, str]:
        """What actually runs, beyond the spec (models used, index size, endpoint): logged as params."""
        ...


@dataclass
class AgentContext:
    """What building an agent may use: the corpus it is scored on, the project's settings."""

    corpus: Corpus
    config: ProjectConfig
    min_overlap: float = 0.5
    use_cache: bool = True
    embedder: object | None = None  # a preloaded embedder to share (tests, benchmarks)
    # Told of slow work the agent starts on its own (a model loaded on first use), for a progress line.
    on_stage: Callable[[str], None] | None = None

    @property
    def cache_dir(self) -> Path:
        return self.config.cache_dir

    def make_llm(self, name: str) -> LLM:
        from ragtrack.llm import make_llm

        return make_llm(name, self.config, use_cache=self.use_cache)


class VersionInfo(BaseModel):
    """The ``[version]`` table every spec file has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""


class AgentTable(BaseModel):
    """Base of an ``[agent]`` table: unknown keys are errors, never silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The citation markers the agent's answers carry (``numeric``: [1], 【1】, [^1]…; ``ragflow``: [ID:0]):
    #: scored by the citation figures, and taken out of the answer a reader and the judges see. Left out
    #: of the spec's dump while empty, so existing specs keep their hash.
    cite_markers: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)

    @field_validator("cite_markers")
    @classmethod
    def _known_markers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            style(name)  # an unknown style is an error naming the known ones
        return value


class AgentSpec(BaseModel):
    """A spec file of an agent kind other than ``pipeline``: ``[version]``, ``[agent]`` and ``[declared]``.

    A kind subclasses it with its own ``agent`` table model (with ``kind: Literal[...]``).
    ``[declared]`` is free: the parameters the user states for that version (chunking
    strategy, top_k, rerank model, ...), logged as params so versions can be compared.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: VersionInfo
    declared: dict[str, str | int | float | bool] = {}


class BaseAgent:
    """Defaults for an agent that needs no setup: subclass it and write ``answer``."""

    max_concurrency = 1
    substituted = False
    top_k: int | None = None
    peak_in_flight = 0

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        self.spec, self.ctx = spec, ctx
        self.identity = AgentIdentity(spec.name, spec.kind, spec.params(), spec.hash)
        self.setup = Setup()

    def answer(self, question: str, history: Sequence[Turn] = ()) -> AgentOutput:
        raise NotImplementedError

    def abandon(self) -> None:
        pass  # nothing runs between answers

    def describe(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class AgentKind:
    """A kind of agent: how its spec file is validated, which files it names, how it is built."""

    name: str
    spec_model: type[BaseModel]  # validates the whole spec file; has a ``version`` table
    build: Callable[[LoadedSpec, AgentContext], Agent]
    # key (a name, or the dotted key path the file is named at) → path relative to the spec file
    files: Callable[[BaseModel], dict[str, str]] = lambda spec: {}
    # The agent's own source files under the project root (the python kind's target module): their
    # text is part of the version, so editing the code registers a new version, as editing a prompt does.
    code: Callable[[BaseModel, Path], list[Path]] = lambda spec, root: []
    # Key → why the text of the file named there is unfit (a prompt lacking what its step fills in).
    check_files: Callable[[BaseModel, dict[str, str]], dict[str, str]] = lambda spec, texts: {}


AGENT_KINDS: Registry[AgentKind] = Registry(
    "agent kind",
    {
        "pipeline": "ragtrack.pipeline.spec:KIND",
        "dify": "ragtrack.agents.dify:KIND",
        "ragflow": "ragtrack.agents.ragflow:KIND",
        "coze": "ragtrack.agents.coze:KIND",
        "http": "ragtrack.agents.http:KIND",
        "python": "ragtrack.agents.python:KIND",
    },
)


def build_agent(spec: LoadedSpec, ctx: AgentContext) -> Agent:
    """The agent a loaded spec describes."""
    return AGENT_KINDS.get(spec.kind).build(spec, ctx)
