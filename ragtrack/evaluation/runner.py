"""Answer and score every golden item: concurrently, checkpointed, never all-or-nothing.

Each finished item is appended to a checkpoint file at once, so a run that
dies half way keeps what it finished; starting the same eval again resumes
from there. One bad item (a failed LLM call, an unreadable verdict) is
recorded on that item and the run goes on; only an endpoint that keeps
failing (:class:`CircuitOpenError`) stops the run early — cleanly, with every
finished item kept. A resumed eval asks the failed items again: an endpoint
that was down is the reason to resume.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ragtrack.agent import Agent, AgentOutput, answer_timed
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.rewrite_judge import FidelityVerdict
from ragtrack.evaluation.scoring import (
    SupportVerdicts,
    check_fidelity,
    check_support,
    citation_check,
    fidelity_input,
    item_record,
    judge_input,
    judges_for,
    score_item,
)
from ragtrack.files import hold_lock, named, release_lock
from ragtrack.golden import GoldenItem, GoldenSet
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError
from ragtrack.records import ItemRecord, JudgeRecord


@dataclass
class EvalOutcome:
    records: list[ItemRecord]
    resumed: int = 0  # items taken from a checkpoint
    stopped_early: str | None = None  # why the run stopped before the last item
    refused: bool = False  # stopped because the endpoint refused its configuration (key, model, URL)
    # The most LLM requests in flight at once, when the engine measured it elsewhere (Spark's executors);
    # None: this process's limiters and agent know.
    peak_in_flight: int | None = None


class Checkpoint:
    """An append-only JSONL of finished items, with a header naming the MLflow run.

    Besides item records it keeps ``build`` rows: the usage of index-time LLM
    work, so a resumed eval still accounts for the index it built before dying.
    """

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._holder: IO[str] | None = None  # the lock file while this process holds the checkpoint

    def hold(self) -> None:
        """Take the checkpoint for this eval (an exclusive lock on a file beside it, let go by
        :meth:`release` or by the process's end). Two evals of one version, golden set and judge
        in one project share a checkpoint: the second took the first's live one for an interrupted
        run, wrote into its MLflow run and failed on its params."""
        self._holder = hold_lock(
            f"{self.path}.lock",
            f"another eval with the same version, golden set and judge is running in this project "
            f"(it holds {self.path}); wait for it to finish",
        )

    def release(self) -> None:
        if self._holder is not None:
            release_lock(self._holder)
            self._holder = None

    def load(self) -> tuple[dict, dict[str, ItemRecord], dict[str, Usage]]:
        """The header, the items to keep (their last record, if :attr:`~ItemRecord.settled`: an item
        whose agent call or a judge failed is asked again) and the build usage."""
        header: dict = {}
        records: dict[str, ItemRecord] = {}
        build: dict[str, Usage] = {}
        if not self.path.is_file():
            return header, records, build
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write: that item simply runs again
            if "header" in row:
                header = row["header"]
            elif "build" in row:
                for step, usage in row["build"].items():
                    build.setdefault(step, Usage()).add(Usage.from_json(usage))
            else:
                records[row["id"]] = ItemRecord.from_json(row)
        return header, {k: r for k, r in records.items() if r.settled}, build

    def ensure_writable(self) -> None:
        """Fail now, in one line, if the checkpoint cannot be written (before hours of answers that
        could not be resumed)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            existed = self.path.exists()
            with self.path.open("a", encoding="utf-8"):
                pass
            if not existed:  # an eval interrupted before its first item leaves no empty checkpoint behind
                self.path.unlink()
        except OSError as e:
            raise RagtrackError(
                f"cannot write the eval's checkpoint {self.path}: {e.strerror or e} "
                "(ragtrack keeps finished items there to resume; make the folder writable)"
            ) from None

    def start(self, header: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file() or self.path.stat().st_size == 0:  # new, or left empty by a crash
            self._append({"header": header})

    def add_build(self, usage: dict[str, Usage]) -> None:
        if usage:
            self._append({"build": {step: u.to_json() for step, u in usage.items()}})

    def add(self, record: ItemRecord) -> None:
        self._append(record.to_json())

    def _append(self, row: dict) -> None:
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise named(e, self.path) from None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def answer_and_score(item: GoldenItem, agent: Agent, panel: JudgePanel) -> ItemRecord:
    """Ask the agent, then score what it said: one item, start to finish, in this thread."""
    started = time.monotonic()
    output = answer_timed(agent, item.question, item.history)
    return score_item(item, output, panel, agent.top_k or len(output.contexts), time.monotonic() - started)


class ItemSink:
    """Where finished items go, whichever engine finished them: the records kept, the checkpoint
    (at once: a run that dies keeps them), the progress callback."""

    def __init__(
        self,
        golden: GoldenSet,
        done: dict[str, ItemRecord] | None = None,
        checkpoint: Checkpoint | None = None,
        on_item: Callable[[ItemRecord], None] | None = None,
    ):
        self.golden, self.checkpoint, self.on_item = golden, checkpoint, on_item
        self.done = {i.id: done[i.id] for i in golden.items if done and i.id in done}
        self.resumed = len(self.done)  # items taken from a checkpoint

    def todo(self) -> list[GoldenItem]:
        """The items no record was kept for yet, in golden order."""
        return [i for i in self.golden.items if i.id not in self.done]

    def finish(self, record: ItemRecord) -> None:
        self.done[record.id] = record
        if self.checkpoint:
            self.checkpoint.add(record)
        if self.on_item:
            self.on_item(record)

    def outcome(self, stopped: CircuitOpenError | None = None, peak_in_flight: int | None = None) -> EvalOutcome:
        """The records kept, in golden order, and why the run stopped early (if it did)."""
        return EvalOutcome(
            records=[self.done[i.id] for i in self.golden.items if i.id in self.done],
            resumed=self.resumed,
            stopped_early=str(stopped) if stopped else None,
            refused=isinstance(stopped, EndpointRefusedError),
            peak_in_flight=peak_in_flight,
        )


def run_local(agent: Agent, panel: JudgePanel, sink: ItemSink) -> EvalOutcome:
    """Score the sink's items still to do in this process.

    Offline and local work is CPU-bound and runs item by item in this thread. When an
    endpoint is involved the work becomes a pipeline: answers are made as fast as the
    agent allows, and every judge call of every answered item is a task of its own, so
    the judge endpoint — under its adaptive limit — is what sets the pace.
    """
    todo = sink.todo()
    stopped: CircuitOpenError | None = None
    if agent.max_concurrency <= 1 and panel.llm.workers <= 1:
        for item in todo:
            try:
                sink.finish(answer_and_score(item, agent, panel))
            except CircuitOpenError as e:
                stopped = e
                break
    else:
        stopped = _pipeline(todo, agent, panel, sink.finish)
    return sink.outcome(stopped)


@dataclass
class _Item:
    """An item between answering and its last verdict."""

    item: GoldenItem
    started: float
    output: AgentOutput | None = None
    verdicts: dict[str, JudgeRecord] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    support: SupportVerdicts | None = None  # the judge's reading of cited sentences the IDs left open
    fidelity: FidelityVerdict | None = None  # the rewrite-fidelity judge's verdict (items without must_keep)
    waiting: int = 0  # judge calls not back yet


def _pipeline(
    todo: list[GoldenItem], agent: Agent, panel: JudgePanel, finish: Callable[[ItemRecord], None]
) -> CircuitOpenError | None:
    """answer → judge with a pool per stage; returns why it stopped early, if it did."""
    answer_workers, judge_workers = max(1, agent.max_concurrency), max(1, panel.llm.workers)
    answerers = ThreadPoolExecutor(answer_workers, thread_name_prefix="answer")
    judges = ThreadPoolExecutor(judge_workers, thread_name_prefix="judge")
    queue = deque(todo)
    answering: dict[Future, _Item] = {}
    judging: dict[Future, _Item] = {}
    stopped: CircuitOpenError | None = None
    interrupted = True
    try:
        while (queue and stopped is None) or answering or judging:
            # Keep the answer stage just full, but answer no more while answered items pile up before
            # the judges (two per judge worker): submitting everything at once would make stopping slow.
            before_judges = len({id(w) for w in judging.values()})
            while queue and stopped is None and len(answering) < answer_workers and before_judges < 2 * judge_workers:
                work = _Item(queue.popleft(), time.monotonic())
                answering[answerers.submit(answer_timed, agent, work.item.question, work.item.history)] = work
            finished, _ = wait([*answering, *judging], return_when=FIRST_COMPLETED)
            for future in finished:
                work = answering.pop(future, None) or judging.pop(future)
                try:
                    result = future.result()
                except CircuitOpenError as e:
                    stopped = stopped or e
                    continue
                if work.output is None:  # an answer: one call per judge that can judge it (judges_for)
                    work.output = result
                    names = judges_for(result, panel)
                    inp = judge_input(work.item, result)
                    for name in names:
                        judging[judges.submit(panel.judge, inp, (name,))] = work
                        work.waiting += 1
                    if (check := citation_check(work.item, result)) and check.asks:
                        judging[judges.submit(check_support, panel, check)] = work
                        work.waiting += 1
                    if rewrite := fidelity_input(work.item, result):
                        judging[judges.submit(check_fidelity, panel, rewrite)] = work
                        work.waiting += 1
                    if work.waiting:
                        continue
                elif isinstance(result, SupportVerdicts):
                    work.support = result
                    work.waiting -= 1
                elif isinstance(result, FidelityVerdict):
                    work.fidelity = result
                    work.waiting -= 1
                else:
                    verdicts, usage = result
                    work.verdicts.update(verdicts)
                    work.usage.update(usage)
                    work.waiting -= 1
                if work.waiting == 0:
                    # In judge order; none for an item the agent gave no answer for.
                    ordered = {name: work.verdicts[name] for name in panel.steps if name in work.verdicts}
                    k = agent.top_k or len(work.output.contexts)
                    latency = time.monotonic() - work.started
                    judged = (work.support, work.fidelity)
                    finish(item_record(work.item, work.output, ordered, work.usage, k, latency, *judged))
            if stopped:  # the endpoint keeps failing: keep what finished, abandon what is in flight
                break
        interrupted = False
    finally:
        # Interrupted or stopped: queued work is dropped and nobody waits for calls in flight, so
        # the process can stop in seconds; finished items are in the checkpoint.
        if interrupted or stopped is not None:
            agent.abandon()
        for pool in (answerers, judges):
            pool.shutdown(wait=not interrupted and stopped is None, cancel_futures=True)
    return stopped
