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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ragtrack.evaluation.judges import JudgeInput, JudgeStep
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.golden import GoldenItem, GoldenSet
from ragtrack.llm.client import LLM, CircuitOpenError
from ragtrack.pipeline.agent import Agent


@dataclass
class JudgeRecord:
    score: int | None
    normalized: float | None
    reason: str
    error: str | None = None
    raw: str | None = None


@dataclass
class ItemRecord:
    """Everything about one golden item in one run: what was retrieved, said and scored."""

    id: str
    type: str
    question: str
    gt_context_ids: list[str]
    gt_answer: str
    answer: str
    retrieved_unit_ids: list[str]
    retrieved_passage_ids: list[str]
    contexts: list[str]
    retrieval: dict[str, float]
    judges: dict[str, JudgeRecord]
    queries: list[str] = field(default_factory=list)
    outline: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    latency_s: float = 0.0

    @classmethod
    def from_json(cls, data: dict) -> ItemRecord:
        data = dict(data)
        data["judges"] = {k: JudgeRecord(**v) for k, v in data["judges"].items()}
        return cls(**data)


@dataclass
class EvalOutcome:
    records: list[ItemRecord]
    resumed: int = 0  # items taken from a checkpoint
    stopped_early: str | None = None  # why the run stopped before the last item


class Checkpoint:
    """An append-only JSONL of finished items, with a header naming the MLflow run."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> tuple[dict, dict[str, ItemRecord]]:
        header: dict = {}
        records: dict[str, ItemRecord] = {}
        if not self.path.is_file():
            return header, records
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write: that item simply runs again
            if "header" in row:
                header = row["header"]
            else:
                records[row["id"]] = ItemRecord.from_json(row)
        return header, records

    def start(self, header: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file():
            self._append({"header": header})

    def add(self, record: ItemRecord) -> None:
        self._append(asdict(record))

    def _append(self, row: dict) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def score_item(item: GoldenItem, agent: Agent, judge_llm: LLM, judges: dict[str, JudgeStep], k: int) -> ItemRecord:
    """Answer one item with the agent, then compute its retrieval metrics and judge verdicts."""
    started = time.monotonic()
    out = agent.answer(item.question)
    retrieved = out.retrieved_passage_ids
    inp = JudgeInput(item.question, out.answer, item.gt_answer, tuple(c.text for c in out.contexts))
    verdicts: dict[str, JudgeRecord] = {}
    for name, step in judges.items():
        result = judge_llm.run(step, inp)
        if result.ok:
            v = result.value
            verdicts[name] = JudgeRecord(v.score, v.normalized, v.reason)
        else:
            verdicts[name] = JudgeRecord(None, None, "", error=result.error, raw=result.raw)
    return ItemRecord(
        id=item.id,
        type=item.type,
        question=item.question,
        gt_context_ids=list(item.gt_context_ids),
        gt_answer=item.gt_answer,
        answer=out.answer,
        retrieved_unit_ids=out.retrieved_unit_ids,
        retrieved_passage_ids=retrieved,
        contexts=[c.text for c in out.contexts],
        retrieval=retrieval_scores(retrieved, item.gt_context_ids, k),
        judges=verdicts,
        queries=out.queries,
        outline=out.outline,
        errors=out.errors,
        tags=list(item.tags),
        latency_s=round(time.monotonic() - started, 3),
    )


def run_items(
    golden: GoldenSet,
    agent: Agent,
    judge_llm: LLM,
    judges: dict[str, JudgeStep],
    *,
    checkpoint: Checkpoint | None = None,
    on_item: Callable[[ItemRecord], None] | None = None,
) -> EvalOutcome:
    """Score every item not already in the checkpoint; items run in parallel when an LLM is remote."""
    k = agent.spec.spec.retrieval.top_k
    done: dict[str, ItemRecord] = checkpoint.load()[1] if checkpoint else {}
    done = {i.id: done[i.id] for i in golden.items if i.id in done}
    resumed = len(done)
    todo = [i for i in golden.items if i.id not in done]
    workers = max(agent.llm.workers, judge_llm.workers)
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
                finish(score_item(item, agent, judge_llm, judges, k))
            except CircuitOpenError as e:
                stopped = str(e)
                break
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending: set[Future] = set()
            queue = list(todo)
            while queue or pending:
                # Keep the pool just full: submitting everything at once would make stopping slow.
                while queue and len(pending) < workers and stopped is None:
                    pending.add(pool.submit(score_item, queue.pop(0), agent, judge_llm, judges, k))
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
    records = [done[i.id] for i in golden.items if i.id in done]
    return EvalOutcome(records=records, resumed=resumed, stopped_early=stopped)
