"""Engines: where an eval's items are answered and judged — this process, or a Spark cluster.

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


@dataclass(frozen=True)
class VersionSource:
    """Where another process finds the version and its judges: what an engine that answers outside this
    process (a Spark executor) rebuilds them from."""

    model_uri: str  # the version's registered pyfunc: models:/<registered model>/<version>
    corpus: str  # the corpus path the agent maps contexts to
    corpus_digest: str  # what an executor's corpus must hash to (another file there means other records)
    root: str  # the project (its ragtrack.toml), absolute
    judge: str  # the judges' LLM name (offline, openai:<model>, local:<path>, a profile)
    use_cache: bool = True


@dataclass
class Work:
    """One eval's items for an engine: the agent and judges built here, where to put each record."""

    agent: Agent
    panel: JudgePanel
    sink: ItemSink
    source: VersionSource
    on_stage: Callable[[str], None] = field(default=lambda stage: None)


class Engine(Protocol):
    """Answers and judges the sink's items still to do; returns the outcome (records in golden order)."""

    name: str

    @property
    def label(self) -> str:
        """The engine as a run's ``ragtrack.engine`` tag names it: ``local``, ``spark:local[2]``."""
        ...

    @classmethod
    def create(cls, config: ProjectConfig, master: str | None) -> Engine:
        """The engine as the project configures it; ``master`` (``--master``) overrides the config's cluster."""
        ...

    def run(self, work: Work) -> EvalOutcome: ...


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
