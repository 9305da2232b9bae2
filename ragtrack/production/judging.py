"""Judging production messages: the reference-free judges on each message they can read.

Triage and the monitor both judge a deterministic sample of the pulled messages;
:func:`judge_chunk` is the work on one chunk of them, the same wherever it runs —
this process (:func:`judge_messages`, the local engine) or a Spark executor
(:mod:`ragtrack.engines.spark`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ragtrack.config import ProjectConfig
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.llm import LLM, CircuitOpenError, make_llm
from ragtrack.llm.accounting import Usage
from ragtrack.production.messages import ProductionMessage
from ragtrack.production.monitor import Cost
from ragtrack.production.signals import REFERENCE_FREE, judge_input, judges_for
from ragtrack.records import JudgeRecord

CHUNK = 50  # verdicts are handed over (and, by the monitor, written) this many messages at a time
#: message ID → judge → verdict
Verdicts = dict[str, dict[str, JudgeRecord]]


@dataclass
class Judging:
    """One judging pass over production messages: who judged, what it cost, what came back."""

    label: str  # the run-param form: "heuristic" or the backend identity
    identity: str  # judge identity (backend, prompts, temperature, max tokens)
    cost: Cost
    verdicts: Verdicts
    failed: int = 0  # verdicts that came back as errors
    stopped: str = ""  # why judging stopped early (the endpoint kept failing), "" when it did not
    accounting: dict | None = None


def reference_free_panel(judge: str, config: ProjectConfig, language: str, use_cache: bool) -> tuple[JudgePanel, LLM]:
    llm = make_llm(judge, config, use_cache=use_cache)
    panel = JudgePanel.create(llm, language, config.eval.judge_max_tokens)
    panel.steps = {name: step for name, step in panel.steps.items() if name in REFERENCE_FREE}
    return panel, llm


def judge_chunk(chunk: list[ProductionMessage], panel: JudgePanel) -> tuple[Verdicts, dict[str, Usage]]:
    """Each judge of ``panel`` on the messages of ``chunk`` it can read; the verdicts and what the calls
    cost. Raises :class:`~ragtrack.llm.CircuitOpenError` when the endpoint keeps failing."""
    verdicts: Verdicts = {m.message_id: {} for m in chunk}
    usage: dict[str, Usage] = {}
    for judge, step in panel.steps.items():
        todo = [m for m in chunk if judge in judges_for(m)]
        for m, result in zip(todo, panel.llm.map(step, [judge_input(m) for m in todo]), strict=True):
            usage.setdefault(step.name, Usage()).add(result.usage)
            if result.ok:
                verdicts[m.message_id][judge] = JudgeRecord(
                    result.value.score, result.value.normalized, result.value.reason
                )
            else:
                verdicts[m.message_id][judge] = JudgeRecord(None, None, "", result.error, result.raw)
    return verdicts, usage


def failures(verdicts: Verdicts) -> int:
    return sum(v.error is not None for by_judge in verdicts.values() for v in by_judge.values())


def judge_messages(
    messages: list[ProductionMessage],
    panel: JudgePanel,
    cost: Cost,
    *,
    on_chunk: Callable[[list[ProductionMessage], Verdicts], None] = lambda m, v: None,
    progress: Callable[[str], None] = lambda line: None,
) -> Judging:
    """Every reference-free judge that can read each message, in this process; ``on_chunk`` hears each
    finished chunk (the monitor writes it to the traces at once, so an interruption loses at most one chunk)."""
    judging = Judging(panel.label, panel.identity, cost, {})
    done = 0
    for start in range(0, len(messages), CHUNK):
        chunk = messages[start : start + CHUNK]
        try:
            verdicts, _ = judge_chunk(chunk, panel)  # the calls' usage is in the LLM's accounting already
        except CircuitOpenError as e:
            judging.stopped = str(e)
            break
        judging.failed += failures(verdicts)
        judging.verdicts.update(verdicts)
        on_chunk(chunk, verdicts)
        done += len(chunk)
        progress(f"judged {done}/{len(messages)} messages")
    judging.accounting = panel.llm.accounting.summary()
    return judging
