"""Project configuration: ``ragtrack.toml`` at the project root (optional).

Everything has a default, so a project that follows the standard layout
(``pipelines/``, ``golden/kb``, ``golden/golden.jsonl``, ``mlruns/``) needs no
config file at all. API keys are never stored here: a profile names the
*environment variable* that holds its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from ragtrack import tomlfile
from ragtrack.errors import InputError, Problem
from ragtrack.llm.accounting import Price
from ragtrack.llm.concurrency import bounds_problem
from ragtrack.secrets import EnvName, declare

if TYPE_CHECKING:
    from ragtrack.corpus import Corpus

Number = Annotated[StrictFloat | StrictInt, Field(ge=0)]

CONFIG_FILE = "ragtrack.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProjectSection(_Strict):
    pipelines: str = "pipelines"
    corpus: str = "golden/kb"
    golden: str = "golden/golden.jsonl"
    # Human labels of some versions' answers (JSONL, docs/statistics.md): eval and compare add
    # prediction-powered figures from them. Empty: golden/labels/human-labels.jsonl when it exists.
    human_labels: str = ""
    # Empty: a SQLite store and artifacts under ./mlruns (MLFLOW_TRACKING_URI wins when set).
    tracking_uri: str = ""
    experiment: str = "ragtrack"
    registered_model: str = "rag-agent"
    cache_dir: str = ".ragtrack/cache"


class CorpusSection(_Strict):
    # A heading section longer than this is split at paragraphs (see ragtrack.corpus).
    max_passage_chars: int = Field(default=1500, gt=0)


class EvalSection(_Strict):
    # A unit covers a passage when they overlap by at least this share of the shorter one.
    min_overlap: float = Field(default=0.5, gt=0.0, le=1.0)
    judge: str = "offline"
    # Enough for a score and a one- or two-sentence reason; part of an LLM judge's identity.
    judge_max_tokens: int = Field(default=160, gt=0)
    max_concurrency: int = Field(default=16, gt=0)
    # A floor under the adaptive limit, for an endpoint known to serve that many at once; equal to
    # max_concurrency, a fixed pool (until replies at two levels in flight tell variance from a
    # queue, the limit halves on a slow streak: README, LLM layer).
    min_concurrency: int = Field(default=1, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    # Verdicts per judge and item (``--judge-samples``): their mean is the item's score, their spread the
    # judge's noise, and compare's interval carries it. LLM judges only: the heuristics are deterministic.
    judge_samples: int = Field(default=1, ge=1, le=20)
    # Judge with the aligned judge ``ragtrack judge align`` saved for the judge (judges/aligned/<judge>.json):
    # its graded examples from the human labels make it another judge identity (``--aligned-judge``).
    judge_aligned: bool = False


class CompareSection(_Strict):
    # What a comparison resamples as one unit: "document" (the first GT passage's), "item", "type", "tag".
    cluster: str = "document"

    @field_validator("cluster")
    @classmethod
    def _known_clustering(cls, name: str) -> str:
        from ragtrack.evaluation.clustering import CLUSTERINGS

        return CLUSTERINGS.check(name)


class PromotionSection(_Strict):
    # Opt-in: promote only when the 95% intervals clear the rule (correctness Δ low > margin, groundedness
    # Δ low >= -tolerance), not only the means. Off: the spec's mean rule.
    require_interval: bool = False

    # Node guards: node metrics (intent_accuracy, rewrite_retention, generation_groundedness) a challenger
    # may not regress on by more than guard_tolerance (default 0), paired item by item with the champion.
    guards: list[str] = []
    guard_tolerance: dict[str, Number] = {}

    @field_validator("guards")
    @classmethod
    def _node_metrics(cls, guards: list[str]) -> list[str]:
        from ragtrack.evaluation.metrics import NODE

        return [NODE.check(f"node/{g.removeprefix('node/')}") for g in guards]

    @model_validator(mode="after")
    def _tolerances_of_guards(self) -> PromotionSection:
        extra = [k for k in self.guard_tolerance if f"node/{k.removeprefix('node/')}" not in self.guards]
        if extra:
            raise ValueError(f"guard_tolerance names {', '.join(extra)}, which guards does not list")
        if any(v < 0 for v in self.guard_tolerance.values()):
            raise ValueError("a guard tolerance is how much the metric may drop: 0 or more")
        return self

    @property
    def guard_rule(self) -> dict[str, float]:
        """Node metric → how much it may drop."""
        tolerance = {f"node/{k.removeprefix('node/')}": float(v) for k, v in self.guard_tolerance.items()}
        return {g: tolerance.get(g, 0.0) for g in self.guards}


class MonitorSection(_Strict):
    """``ragtrack monitor``: how much of each day it judges, and what counts as a drop."""

    # Share of messages judged by groundedness and relevance (chosen by a hash of each message).
    sample_rate: float = Field(default=0.2, ge=0.0, le=1.0)
    # At most this many judge calls per monitor run; the sample is cut to fit, in sample order.
    max_calls: int = Field(default=2000, ge=0)
    # A window (app version x day) with fewer messages is never compared with the day before.
    min_messages: int = Field(default=20, ge=1)
    # metric -> how much worse than the previous day it may get before the monitor exits 1 (0-1 scale):
    # dislike_rate, no_retrieval_rate, refusal_rate (rising) and like_rate, groundedness, relevance (falling);
    # intent_shift (a workflow's intent distribution moving from the day before: 0-1, no default).
    max_drop: dict[str, Number] = {
        "dislike_rate": 0.05,
        "no_retrieval_rate": 0.05,
        "groundedness": 0.1,
        "relevance": 0.1,
    }

    @field_validator("max_drop")
    @classmethod
    def _known(cls, max_drop: dict[str, float]) -> dict[str, float]:
        from ragtrack.production.monitor import METRICS

        unknown = [k for k in max_drop if k not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {', '.join(unknown)}; expected some of: {', '.join(METRICS)}")
        return max_drop


class SparkSection(_Strict):
    """Where ``ragtrack eval --engine spark`` runs (``--master`` overrides ``master``)."""

    # local[*]: every core of this machine; spark://host:7077, yarn or k8s://…: a cluster.
    master: str = "local[*]"
    # Spark settings passed as they are: spark.executor.memory, spark.executorEnv.<VAR>, …
    conf: dict[str, str] = {}


class Profile(_Strict):
    """A named OpenAI-compatible endpoint: ``--llm deepseek`` or ``--judge deepseek``."""

    base_url: str
    model: str
    api_key_env: EnvName | None = None
    max_concurrency: int | None = Field(default=None, gt=0)
    min_concurrency: int | None = Field(default=None, gt=0)


class PriceSpec(_Strict):
    """USD per million tokens of one model (the cost column of the accounting)."""

    input: Number = 0.0
    output: Number = 0.0


class ProjectConfig(_Strict):
    root: Path = Path(".")
    project: ProjectSection = ProjectSection()
    corpus: CorpusSection = CorpusSection()
    eval: EvalSection = EvalSection()
    compare: CompareSection = CompareSection()
    promotion: PromotionSection = PromotionSection()
    monitor: MonitorSection = MonitorSection()
    spark: SparkSection = SparkSection()
    profiles: dict[str, Profile] = {}
    prices: dict[str, PriceSpec] = {}
    # Absolute release gates checked by ``ragtrack promote``: metric name → minimum.
    gates: dict[str, Number] = {}

    @field_validator("gates")
    @classmethod
    def _known_metrics(cls, gates: dict[str, float]) -> dict[str, float]:
        from ragtrack.evaluation.metrics import lookup  # the metric registry names what can be gated

        # By the name runs log: a gate on `reciprocal_rank` (the per-item name of `mrr`) read "missing"
        return {lookup(name).name: threshold for name, threshold in gates.items()}

    @model_validator(mode="after")
    def _judge_is_known(self) -> ProjectConfig:
        if problem := llm_name_problem(self.eval.judge, self.profiles):  # now, not at the first eval
            raise ValueError(f"eval.judge: {problem}")
        return self

    @model_validator(mode="after")
    def _floors_under_ceilings(self) -> ProjectConfig:
        # Blamed on the floor's key (a dotted path): the problem is reported at its line.
        bounds = [("eval.min_concurrency", self.eval.min_concurrency, self.eval.max_concurrency)]
        for name, p in self.profiles.items():
            floor = p.min_concurrency or self.eval.min_concurrency  # a profile's own, else [eval]'s
            bounds.append((f"profiles.{name}.min_concurrency", floor, p.max_concurrency or self.eval.max_concurrency))
        for where, floor, ceiling in bounds:
            if problem := bounds_problem(floor, ceiling):
                raise ValueError(f"{where}: {problem}")
        return self

    @property
    def price_table(self) -> dict[str, Price]:
        return {model: Price(p.input, p.output) for model, p in self.prices.items()}

    def path(self, relative: str) -> Path:
        return (self.root / relative) if not Path(relative).is_absolute() else Path(relative)

    def where(self, *key: str) -> str:
        """``<root>/ragtrack.toml:<line>`` of ``key`` (else of its nearest enclosing table), for messages."""
        path = self.root / CONFIG_FILE
        line = tomlfile.file_key_line(path, key)
        return f"{path}:{line}" if line else str(path)

    @property
    def cache_dir(self) -> Path:
        return self.path(self.project.cache_dir)

    def load_corpus(self, path: str | Path | None = None) -> Corpus:
        """The project's corpus (or the one at ``path``), split as ``[corpus]`` says."""
        from ragtrack.corpus import load_corpus

        target = Path(path) if path else self.path(self.project.corpus)
        if not target.exists() and not path and not (self.root / CONFIG_FILE).is_file():
            raise InputError(
                [Problem(str(target), "corpus not found; `ragtrack init --corpus <your documents>` starts a project")]
            )
        return load_corpus(target, self.corpus.max_passage_chars)


def llm_name_problem(name: str, profiles: dict) -> str | None:
    """What is wrong with an LLM name (``--llm``, ``--judge``, ``[eval] judge``), if anything."""
    if name == "offline" or name.startswith(("openai:", "local:")) or name in profiles:
        return None
    known = ", ".join(["offline", "openai:<model>", "local:<path|smollm2>", *profiles])
    return f"unknown LLM {name!r}; expected one of: {known}"


def find_root(start: str | Path = ".") -> Path | None:
    """The project ``start`` lies in: the nearest folder, ``start`` or above, that holds a
    ``ragtrack.toml`` or a ``pipelines/`` folder (as git finds its repository); None outside any."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file() or (folder / "pipelines").is_dir():
            return folder
    return None


def load_config(root: str | Path = ".") -> ProjectConfig:
    """Read ``ragtrack.toml`` under ``root`` if present; defaults otherwise."""
    root = Path(root)
    path = root / CONFIG_FILE
    if not path.is_file():
        return ProjectConfig(root=root)
    raw, text = tomlfile.load(path)
    config = tomlfile.validate(ProjectConfig, raw, path, text, root=root)
    declare(*(p.api_key_env for p in config.profiles.values()))
    return config
