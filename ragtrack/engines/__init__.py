"""Engines: where an eval's items are answered and judged, and production messages judged — this
process, or a Spark cluster.

Everything before the items (inputs, the agent's identity, the run) and after them
(aggregation, traces, metrics, the description) is the same code whichever engine
runs; an engine only turns the golden items still to do into item records, each
handed to :class:`~ragtrack.evaluation.runner.ItemSink` as it finishes (checkpointed,
shown as progress). Records are made by one function
(:func:`~ragtrack.evaluation.scoring.item_record`) from the agent's output and the
judges' verdicts, so both engines give the same records for the same answers.

* ``local`` — this process (:mod:`ragtrack.evaluation.runner`): threads over the
  agent's and the judge endpoint's concurrency.
* ``spark`` — the version's registered pyfunc answers through ``mlflow.pyfunc.spark_udf``,
  judges run in a pandas UDF under the endpoint's total limit (:mod:`ragtrack.engines.spark`).

The monitor's judging goes through the same port (:meth:`Engine.judge_messages`): one
chunk of messages is judged by :func:`~ragtrack.production.judging.judge_chunk` wherever
it runs, and the verdicts are written to the traces here, as they come.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ragtrack.registry import Registry

if TYPE_CHECKING:
    from ragtrack.agent import Agent
    from ragtrack.config import ProjectConfig
    from ragtrack.evaluation.judges import JudgePanel
    from ragtrack.evaluation.runner import EvalOutcome, ItemSink
    from ragtrack.production.judging import Judging, Verdicts
    from ragtrack.production.messages import ProductionMessage
    from ragtrack.production.monitor import Cost


@dataclass(frozen=True)
class JudgeSource:
    """What another process (a Spark executor) rebuilds the judges from: the project's config names
    the judge's profile, cache and token budget."""

    root: str  # the project (its ragtrack.toml), absolute
    judge: str  # the judges' LLM name (offline, openai:<model>, local:<path>, a profile)
    use_cache: bool = True
    aligned: bool = False  # the judge's aligned prompts (judges/aligned/<judge>.json of the project)


@dataclass(frozen=True)
class VersionSource:
    """Where another process finds the version and its judges."""

    model_uri: str  # the version's registered pyfunc: models:/<registered model>/<version>
    corpus: str  # the corpus path the agent maps contexts to
    corpus_digest: str  # what an executor's corpus must hash to (another file there means other records)
    judges: JudgeSource


@dataclass
class Work:
    """One eval's items for an engine: the agent and judges built here, where to put each record."""

    agent: Agent
    panel: JudgePanel
    sink: ItemSink
    source: VersionSource
    on_stage: Callable[[str], None] = field(default=lambda stage: None)


@dataclass
class MessageWork:
    """Production messages for an engine to judge (the monitor's sample): the reference-free panel built
    here, what judging will cost, and who hears each finished chunk of verdicts."""

    messages: list[ProductionMessage]
    panel: JudgePanel
    cost: Cost
    source: JudgeSource
    on_chunk: Callable[[list[ProductionMessage], Verdicts], None] = field(default=lambda m, v: None)
    progress: Callable[[str], None] = field(default=lambda line: None)


class Engine(Protocol):
    """Where the work is done: an eval's items answered and judged, production messages judged."""

    name: str

    @property
    def label(self) -> str:
        """The engine as a run's ``ragtrack.engine`` tag names it: ``local``, ``spark:local[2]``."""
        ...

    @classmethod
    def create(cls, config: ProjectConfig, master: str | None) -> Engine:
        """The engine as the project configures it; ``master`` (``--master``) overrides the config's cluster."""
        ...

    def run(self, work: Work) -> EvalOutcome:
        """Answer and judge the sink's items still to do; the outcome's records in golden order."""
        ...

    def judge_messages(self, work: MessageWork) -> Judging:
        """Every reference-free judge on each message it can read, each chunk handed to ``on_chunk``."""
        ...


def make_engine(name: str, config: ProjectConfig, master: str | None = None) -> Engine:
    """The engine registered as ``name`` (an unknown name is an error listing the known ones)."""
    return ENGINES.get(name).create(config, master)


ENGINES: Registry[type[Engine]] = Registry(
    "engine",
    {
        "local": "ragtrack.engines.local:LocalEngine",
        "spark": "ragtrack.engines.spark:SparkEngine",
    },
)
