"""Answer and score every golden item: concurrently, checkpointed, never all-or-nothing.

Each finished item is appended to a checkpoint file at once, so a run that
dies half way keeps what it finished; starting the same eval again resumes
from there. One bad item (a failed LLM call, an unreadable verdict) is
recorded on that item and the run goes on; only an endpoint that keeps
failing (:class:`CircuitOpenError`) stops the run early — cleanly, with every
finished item kept.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from ragtrack.agent import Agent, answer_timed
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.scoring import score_item
from ragtrack.golden import GoldenItem, GoldenSet
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import CircuitOpenError
from ragtrack.records import ItemRecord


@dataclass
class EvalOutcome:
    records: list[ItemRecord]
    resumed: int = 0  # items taken from a checkpoint
    stopped_early: str | None = None  # why the run stopped before the last item


class Checkpoint:
    """An append-only JSONL of finished items, with a header naming the MLflow run.

    Besides item records it keeps ``build`` rows: the usage of index-time LLM
    work, so a resumed eval still accounts for the index it built before dying.
    """

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> tuple[dict, dict[str, ItemRecord], dict[str, Usage]]:
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
        return header, records, build

    def start(self, header: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file():
            self._append({"header": header})

    def add_build(self, usage: dict[str, Usage]) -> None:
        if usage:
            self._append({"build": {step: u.to_json() for step, u in usage.items()}})

    def add(self, record: ItemRecord) -> None:
        self._append(record.to_json())

    def _append(self, row: dict) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def answer_and_score(item: GoldenItem, agent: Agent, panel: JudgePanel) -> ItemRecord:
    """Ask the agent, then score what it said (the unit of work the runner schedules)."""
    started = time.monotonic()
    output = answer_timed(agent, item.question)
    k = agent.top_k or len(output.contexts)
    return score_item(item, output, panel, k, latency_s=time.monotonic() - started)


def run_items(
    golden: GoldenSet,
    agent: Agent,
    panel: JudgePanel,
    *,
    done: dict[str, ItemRecord] | None = None,
    checkpoint: Checkpoint | None = None,
    on_item: Callable[[ItemRecord], None] | None = None,
) -> EvalOutcome:
    """Score every item not already ``done``; items run in parallel when an endpoint is involved."""
    done = {i.id: done[i.id] for i in golden.items if done and i.id in done}
    resumed = len(done)
    todo = [i for i in golden.items if i.id not in done]
    workers = max(agent.max_concurrency, panel.llm.workers)
    stopped: str | None = None

    def finish(record: ItemRecord) -> None:
        done[record.id] = record
        if checkpoint:
            checkpoint.add(record)
        if on_item:
            on_item(record)

    if workers == 1:
        for item in todo:
            try:
                finish(answer_and_score(item, agent, panel))
            except CircuitOpenError as e:
                stopped = str(e)
                break
    else:
        pool = ThreadPoolExecutor(max_workers=workers)
        interrupted = True
        try:
            pending: set[Future] = set()
            queue = list(todo)
            while queue or pending:
                # Keep the pool just full: submitting everything at once would make stopping slow.
                while queue and len(pending) < workers and stopped is None:
                    pending.add(pool.submit(answer_and_score, queue.pop(0), agent, panel))
                if not pending:
                    break
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        finish(future.result())
                    except CircuitOpenError as e:
                        stopped = stopped or str(e)
                if stopped:
                    queue.clear()
            interrupted = False
        finally:
            # Interrupted (Ctrl-C, an error): queued items are dropped and nobody waits for the calls
            # in flight, so the process can stop in seconds; finished items are in the checkpoint.
            pool.shutdown(wait=not interrupted, cancel_futures=True)
    records = [done[i.id] for i in golden.items if i.id in done]
    return EvalOutcome(records=records, resumed=resumed, stopped_early=stopped)
