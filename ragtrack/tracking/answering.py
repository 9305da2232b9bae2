"""What a registered agent version does once loaded as a pyfunc (``agent_model.py`` delegates here).

Kept out of the model's code file on purpose: MLflow copies that file into each
model it logs, so behaviour written there would be frozen per model version; here
it is the installed ragtrack's.

Two output forms, chosen by the ``output`` key of the model's config:

* ``answer`` (the default; what ``mlflow models serve`` returns): one
  ``{"answer", "retrieved_ids", "contexts", "context_ids", "version"}`` per question;
* ``record``: one JSON string per question holding the whole
  :class:`~ragtrack.agent.AgentOutput` (stages, usage, errors) — what the Spark
  engine scores exactly as the local engine scores an answer made in its own process.

A follow-up question travels in the same string column as JSON (:func:`follow_up`).

The agent is built once per process and kept (a Spark worker loads the model again
for every task; the index and models behind it load once).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.agent import answer_timed, turns_json

if TYPE_CHECKING:
    from ragtrack.agent import Agent
    from ragtrack.corpus import Corpus
    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

#: Every key a logged model's config has (MLflow lets a loader override only the keys logged).
MODEL_CONFIG_KEYS = ("corpus", "root", "use_cache", "output")
OUTPUTS = ("answer", "record")

_agents: dict[tuple, tuple[Agent, Corpus]] = {}
_agents_lock = threading.Lock()


@dataclass(frozen=True)
class ModelSettings:
    """The model config: ``corpus`` (contexts are mapped to its passages), ``root`` (the project, for its
    ``ragtrack.toml``), ``use_cache`` (read cached replies), ``output`` (one of :data:`OUTPUTS`)."""

    corpus: str | None = None
    root: str = "."
    use_cache: bool = True
    output: str = "answer"

    @classmethod
    def of(cls, config: dict | None) -> ModelSettings:
        settings = cls(**{k: v for k, v in (config or {}).items() if k in MODEL_CONFIG_KEYS})
        if settings.output not in OUTPUTS:
            raise ValueError(f"model config output must be one of {', '.join(OUTPUTS)} (got {settings.output!r})")
        return settings


def built_agent(spec: LoadedSpec, settings: ModelSettings) -> tuple[Agent, Corpus]:
    """The agent of ``spec`` on ``settings``' corpus, built once per process."""
    key = (spec.to_json(), settings.root, settings.corpus, settings.use_cache)
    with _agents_lock:
        if key not in _agents:
            from ragtrack.agent import AgentContext, build_agent
            from ragtrack.config import load_config

            config = load_config(settings.root)
            # Relative: to the project (models logged before the path was made absolute).
            corpus = config.load_corpus(config.path(settings.corpus) if settings.corpus else None)
            # The model's process (`ragtrack serve`, a Spark task) has no progress printer: what takes
            # seconds or minutes (the index, the embedding model) is said on its stderr, the server's log.
            ctx = AgentContext(corpus, config, config.eval.min_overlap, settings.use_cache, on_stage=_say)
            _agents[key] = (build_agent(spec, ctx), corpus)
        return _agents[key]


def _say(line: str) -> None:
    print(f"ragtrack: {line}", file=sys.stderr, flush=True)


def follow_up(question: str, history: Sequence[Turn]) -> str:
    """How a follow-up travels in the pyfunc's one string column: ``{"question", "history"}`` as JSON
    (a lone question is sent as it is)."""
    if not history:
        return question
    return json.dumps({"question": question, "history": turns_json(history)}, ensure_ascii=False)


def asked(text: str) -> tuple[str, tuple[Turn, ...]]:
    """(question, earlier turns) of one input string: :func:`follow_up`'s JSON, or a plain question
    (anything else that starts with ``{`` is a question too)."""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return text, ()
        if isinstance(data, dict) and set(data) == {"question", "history"} and isinstance(data["question"], str):
            from ragtrack.golden import Turn

            try:
                return data["question"], tuple(Turn.model_validate(t) for t in data["history"])
            except (TypeError, ValueError):
                return text, ()
    return text, ()


def answer_all(spec: LoadedSpec, settings: ModelSettings, questions: list[str]) -> list:
    """One output per question (a plain question, or a follow-up as :func:`follow_up` writes it), in the
    form ``settings.output`` names."""
    agent, corpus = built_agent(spec, settings)
    if settings.output == "record":
        return [answer_record(agent, corpus, *asked(q)) for q in questions]
    outputs = []
    for text in questions:
        out = answer_timed(agent, *asked(text))
        outputs.append(
            {
                "answer": out.answer,
                "retrieved_ids": out.passage_ids,
                "contexts": [c.text for c in out.contexts],
                "context_ids": [list(c.passage_ids) for c in out.contexts],
                "version": spec.name,
            }
        )
    return outputs


def answer_record(agent: Agent, corpus: Corpus, question: str, history: Sequence[Turn] = ()) -> str:
    """``{"output", "corpus_digest", "seconds"}`` as JSON; ``{"stopped", "refused"}`` when the agent's
    endpoint keeps failing (the engine stops the run as the local engine does, keeping what finished)."""
    from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError

    started = time.monotonic()
    try:
        output = answer_timed(agent, question, history)
    except CircuitOpenError as e:
        return json.dumps({"stopped": str(e), "refused": isinstance(e, EndpointRefusedError)})
    seconds = time.monotonic() - started
    return json.dumps(
        {"output": output.to_json(), "corpus_digest": corpus.digest, "seconds": seconds}, ensure_ascii=False
    )


def load_spec_file(path: str) -> LoadedSpec:
    from ragtrack.spec import LoadedSpec

    return LoadedSpec.from_json(Path(path).read_text("utf-8"))
