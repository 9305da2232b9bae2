"""The local engine: every item answered and judged in this process
(:func:`~ragtrack.evaluation.runner.run_local`), production messages judged here too
(:func:`~ragtrack.production.judging.judge_messages`)."""

from __future__ import annotations

from ragtrack.config import ProjectConfig
from ragtrack.engines import MessageWork, Work
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.runner import EvalOutcome, run_local
from ragtrack.production.judging import Judging, judge_messages


class LocalEngine:
    name = label = "local"

    @classmethod
    def create(cls, config: ProjectConfig, master: str | None) -> LocalEngine:
        if master:
            raise RagtrackError(f"--master {master} names a Spark cluster: it goes with --engine spark")
        return cls()

    def run(self, work: Work) -> EvalOutcome:
        return run_local(work.agent, work.panel, work.sink)

    def judge_messages(self, work: MessageWork) -> Judging:
        return judge_messages(work.messages, work.panel, work.cost, on_chunk=work.on_chunk, progress=work.progress)
