"""LLM-as-a-judge: four rubric judges, each an LLM :class:`Step` returning a 1–5 verdict.

* correctness  — answer vs GT answer (the criterion every iteration is judged by);
* groundedness — answer vs retrieved contexts only (hallucination check);
* relevance    — answer vs question only, no contexts (isolates the variable);
* organization — answer vs contexts (did it fuse the material or stitch excerpts).

Prompts live in ``prompts/<lang>/<judge>.md`` (English and Chinese, chosen by
the golden set's language). Replies are untrusted text: :func:`parse_verdict`
reads what it can, the LLM client makes one repair round, and an item that
still fails is recorded as a judge error — excluded from means, counted,
never a crash and never NaN. Offline, each judge falls back to its heuristic.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from ragtrack.evaluation import heuristics
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.jsonparse import extract_json
from ragtrack.pipeline.generate import format_contexts
from ragtrack.text import chat_messages

JUDGES: tuple[str, ...] = ("correctness", "groundedness", "relevance", "organization")
LANGUAGES = ("en", "zh")
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
}
_SCORE = re.compile(r"[\"'“]?score[\"'”]?\s*[:：]\s*[\"'“]?\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_REASON = re.compile(r"[\"'“]?reason[\"'”]?\s*[:：]\s*[\"'“](.*?)(?:[\"'”]\s*[,}，｝]|$)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class JudgeInput:
    question: str
    answer: str
    gt_answer: str
    contexts: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    score: int
    reason: str

    @property
    def normalized(self) -> float:
        """1–5 → 0–1."""
        return (self.score - 1) / 4


def _to_score(value: object) -> int:
    if isinstance(value, bool):
        raise ParseError("score is a boolean")
    if isinstance(value, str):
        m = re.match(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*5)?\s*$", value)
        if not m:
            raise ParseError(f"score {value!r} is not a number")
        value = float(m.group(1))
    if not isinstance(value, int | float):
        raise ParseError(f"score has type {type(value).__name__}")
    if float(value) != int(value):
        raise ParseError(f"score {value} is not an integer")
    if not 1 <= int(value) <= 5:
        raise ParseError(f"score {value} is outside 1-5")
    return int(value)


def parse_verdict(text: str) -> Verdict:
    """A verdict from a judge's reply: JSON first, then a tolerant field scan.

    Accepts code fences, surrounding prose, full-width punctuation, a score as a
    string ("4", "4/5") or an integral float; rejects anything outside 1–5.
    A truncated reply whose score is readable keeps the score.
    """
    try:
        data = extract_json(text)
    except ParseError:
        data = None
    if isinstance(data, dict) and ("score" in data or "Score" in data):
        score = _to_score(data.get("score", data.get("Score")))
        return Verdict(score, str(data.get("reason", data.get("Reason", ""))).strip())
    m = _SCORE.search(text or "")
    if not m:
        raise ParseError("no score in the reply")
    reason = _REASON.search(text)
    return Verdict(_to_score(m.group(1)), reason.group(1).strip() if reason else "(no reason given)")


def load_prompt(judge: str, language: str) -> str:
    return resources.files("ragtrack.evaluation").joinpath(f"prompts/{language}/{judge}.md").read_text("utf-8")


@dataclass
class JudgeStep(Step[JudgeInput, Verdict]):
    """One judge as an LLM step; ``offline`` is its heuristic."""

    judge: str = "correctness"

    def messages(self, inp: JudgeInput) -> list[dict[str, str]]:
        return chat_messages(
            self.prompt,
            question=inp.question,
            answer=inp.answer or "(empty answer)",
            gt_answer=inp.gt_answer,
            contexts=format_contexts(inp.contexts),
        )

    def parse(self, text: str) -> Verdict:
        return parse_verdict(text)

    def offline(self, inp: JudgeInput) -> Verdict:
        if self.judge == "correctness":
            return Verdict(*heuristics.correctness(inp.answer, inp.gt_answer))
        if self.judge == "groundedness":
            return Verdict(*heuristics.groundedness(inp.answer, inp.contexts))
        if self.judge == "relevance":
            return Verdict(*heuristics.relevance(inp.question, inp.answer))
        return Verdict(*heuristics.organization(inp.answer, inp.contexts))


def judge_steps(language: str, judges: tuple[str, ...] = JUDGES) -> dict[str, JudgeStep]:
    """Temperature-0 judge steps for ``language`` (``en`` or ``zh``)."""
    return {
        j: JudgeStep(
            f"judge.{j}",
            load_prompt(j, language),
            max_tokens=160,  # a score and a one- or two-sentence reason
            temperature=0.0,
            json_schema=VERDICT_SCHEMA,
            judge=j,
        )
        for j in judges
    }


def prompt_hash(steps: dict[str, JudgeStep]) -> str:
    """One hash over every judge prompt in use: part of the judge identity."""
    h = hashlib.sha256()
    for name in sorted(steps):
        h.update(name.encode() + b"\0" + steps[name].prompt.encode() + b"\0")
    return h.hexdigest()[:12]


def judge_identity(backend: str, steps: dict[str, JudgeStep]) -> str:
    """(backend, model, prompt hash, temperature): runs judged differently are not comparable."""
    if backend == "offline":
        return f"heuristic@{HEURISTIC_VERSION}"
    return f"{backend}|prompts={prompt_hash(steps)}|t=0.0"


# Bump when a heuristic changes, so old and new heuristic scores are never compared.
HEURISTIC_VERSION = "h2"
