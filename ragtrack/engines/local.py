"""The local engine: every item answered and judged in this process
(:func:`~ragtrack.evaluation.runner.run_local`)."""

from __future__ import annotations

from ragtrack.config import ProjectConfig
from ragtrack.engines import Work
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.runner import EvalOutcome, run_local


class LocalEngine:
    name = label = "local"

    @classmethod
    def create(cls, config: ProjectConfig, master: str | None) -> LocalEngine:
        if master:
            raise RagtrackError(f"--master {master} names a Spark cluster: it goes with --engine spark")
        return cls()

    def run(self, work: Work) -> EvalOutcome:
        return run_local(work.agent, work.panel, work.sink)
