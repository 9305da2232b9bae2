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
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.scoring import judge_input, judges_for
from ragtrack.golden import GoldenItem
from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError


@dataclass(frozen=True)
class JudgeSetup:
    """How an executor builds the driver's judges (shipped to it inside the UDF)."""

    root: str  # the project: its ragtrack.toml names the judge's profiles, caches and token budget
    judge: str  # the LLM name
    language: str
    use_cache: bool
    samples: int  # verdicts per LLM judge and item (--judge-samples)
    ceiling: int | None  # this task's share of the endpoint's concurrency; None: no endpoint to share
    identity: str  # the driver's panel's: the executor's must match
    # The variables the judge's backend reads (its key, its base URL); set while the panel is made.
    env: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> tuple:
        return (self.root, self.judge, self.language, self.use_cache, self.samples, self.ceiling, self.identity)


_panels: dict[tuple, JudgePanel] = {}
_lock = threading.Lock()


def panel_for(setup: JudgeSetup) -> JudgePanel:
    """The judges of ``setup``, made once per Python worker (its limiter and circuit then span its tasks)."""
    with _lock:
        if setup.key not in _panels:
            from ragtrack.config import load_config
            from ragtrack.llm import make_llm

            saved = {name: os.environ.get(name) for name in setup.env}
            os.environ.update(setup.env)
            try:
                config = load_config(setup.root)
                llm = make_llm(setup.judge, config, use_cache=setup.use_cache, ceiling=setup.ceiling)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            panel = JudgePanel.create(llm, setup.language, config.eval.judge_max_tokens, setup.samples)
            if panel.identity != setup.identity:
                raise RagtrackError(
                    f"the judges on a Spark executor are {panel.identity}, not {setup.identity} as on the driver "
                    f"(does {setup.root}/ragtrack.toml read the same there?)"
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
