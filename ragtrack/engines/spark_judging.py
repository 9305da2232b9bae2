"""What the Spark engine's judge UDF does on an executor: the same judges, through the same LLM layer.

The panel is built once per Python worker from the project's config, with the judge
endpoint's concurrency lowered to this task's share (``ceiling``), and must have the
identity the driver's panel has — another model or prompt there would judge other items
than the run says. Each row comes back as JSON: the verdicts and their usage, or
``stopped`` when the endpoint keeps failing (the driver stops the run as the local
engine does), or ``failed`` when the executor cannot judge at all.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from ragtrack.agent import AgentOutput
from ragtrack.engines import JudgeSource
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.scoring import judge_input, judges_for
from ragtrack.golden import GoldenItem
from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError


@dataclass(frozen=True)
class JudgeSetup:
    """How an executor builds the driver's judges (shipped to it inside the UDF)."""

    source: JudgeSource  # the project, the judge's LLM name, whether cached replies are read
    language: str
    samples: int  # verdicts per LLM judge and item (--judge-samples)
    steps: tuple[str, ...]  # the driver's panel's judges (the monitor's: the reference-free ones)
    ceiling: int | None  # this task's share of the endpoint's concurrency; None: no endpoint to share
    identity: str  # the driver's panel's: the executor's must match
    # The variables the judge's backend reads (its key, its base URL); set while the panel is made.
    env: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, source: JudgeSource, panel: JudgePanel, ceiling: int | None, env: dict[str, str]) -> JudgeSetup:
        return cls(source, panel.language, panel.samples, tuple(panel.steps), ceiling, panel.identity, env)

    @property
    def key(self) -> tuple:
        return (self.source, self.language, self.samples, self.steps, self.ceiling, self.identity)


_panels: dict[tuple, JudgePanel] = {}
_lock = threading.Lock()


def panel_for(setup: JudgeSetup) -> JudgePanel:
    """The judges of ``setup``, made once per Python worker (its limiter and circuit then span its tasks)."""
    with _lock:
        if setup.key not in _panels:
            from ragtrack.config import load_config
            from ragtrack.llm import make_llm

            source = setup.source
            saved = {name: os.environ.get(name) for name in setup.env}
            os.environ.update(setup.env)
            try:
                config = load_config(source.root)
                llm = make_llm(source.judge, config, use_cache=source.use_cache, ceiling=setup.ceiling)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            examples, digest = {}, ""
            if source.aligned:
                from ragtrack.evaluation.alignment import load_aligned

                aligned = load_aligned(config.root, source.judge, llm.identity)
                examples, digest = aligned.examples(setup.language), aligned.digest
            panel = JudgePanel.create(
                llm, setup.language, config.eval.judge_max_tokens, setup.samples, examples, digest
            )
            panel.steps = {name: step for name, step in panel.steps.items() if name in setup.steps}
            if panel.identity != setup.identity:
                raise RagtrackError(
                    f"the judges on a Spark executor are {panel.identity}, not {setup.identity} as on the driver "
                    f"(does {source.root}/ragtrack.toml read the same there?)"
                )
            _panels[setup.key] = panel
        return _panels[setup.key]


def judge_rows(setup: JudgeSetup, items: list[str], answers: list[str]) -> list[str]:
    """One JSON verdict row per (golden item JSON, answer record JSON) pair, in order."""
    try:
        panel = panel_for(setup)
    except Exception as e:  # the driver raises it as the run's error, in one line
        return [json.dumps({"failed": f"{type(e).__name__}: {e}"})] * len(items)

    def one(pair: tuple[str, str]) -> str:
        item_json, answer_json = pair
        answered = json.loads(answer_json)
        if "output" not in answered:  # the agent's endpoint stopped the run: nothing to judge
            return json.dumps({"skipped": True})
        item = GoldenItem.model_validate_json(item_json)
        output = AgentOutput.from_json(answered["output"])
        started = time.monotonic()
        names = judges_for(output, panel)
        try:
            verdicts, usage = panel.judge(judge_input(item, output), names) if names else ({}, {})
        except CircuitOpenError as e:
            return json.dumps({"stopped": str(e), "refused": isinstance(e, EndpointRefusedError)})
        return json.dumps(
            {
                "verdicts": {name: asdict(v) for name, v in verdicts.items()},
                "usage": {step: u.to_json() for step, u in usage.items()},
                "seconds": time.monotonic() - started,
                "worker": f"{os.uname().nodename}:{os.getpid()}",
                "peak": panel.llm.limiter.peak_in_flight,
            },
            ensure_ascii=False,
        )

    pairs = list(zip(items, answers, strict=True))
    if panel.llm.workers <= 1:  # offline heuristics, a model in this process: CPU-bound, one at a time
        return [one(p) for p in pairs]
    with ThreadPoolExecutor(panel.llm.workers, thread_name_prefix="judge") as pool:  # the limiter decides
        return list(pool.map(one, pairs))


def judge_message_rows(setup: JudgeSetup, messages: list[str]) -> list[str]:
    """The verdicts on a task's production messages (JSON each), through the same
    :func:`~ragtrack.production.judging.judge_chunk` as in the driver's process: one JSON row per
    message, the task's usage and peak on the first."""
    from ragtrack.production.judging import judge_chunk
    from ragtrack.production.messages import ProductionMessage

    try:
        panel = panel_for(setup)
    except Exception as e:  # the driver raises it as the run's error, in one line
        return [json.dumps({"failed": f"{type(e).__name__}: {e}"})] * len(messages)
    chunk = [ProductionMessage.from_json(json.loads(m)) for m in messages]
    try:
        verdicts, usage = judge_chunk(chunk, panel)
    except CircuitOpenError as e:
        return [json.dumps({"stopped": str(e), "refused": isinstance(e, EndpointRefusedError)})] * len(messages)
    task = {
        "usage": {step: u.to_json() for step, u in usage.items()},
        "worker": f"{os.uname().nodename}:{os.getpid()}",
        "peak": panel.llm.limiter.peak_in_flight,
    }
    rows = [
        {"verdicts": {name: asdict(v) for name, v in verdicts[m.message_id].items()}, **(task if i == 0 else {})}
        for i, m in enumerate(chunk)
    ]
    return [json.dumps(row, ensure_ascii=False) for row in rows]
