"""The rewrite-fidelity judge: does a workflow's rewrite node keep what the user asked?

A rewrite node turns the question into the query retrieval reads. A golden item's ``must_keep`` terms
check it exactly (:func:`ragtrack.evaluation.nodes.retention`); an item without them is judged
instead: the question against the rewritten query alone, 1–5, on whether the query still asks the
same thing — every constraint, entity, number and term of art kept, nothing added that narrows or
shifts it. The verdict is kept on the rewrite's stage (``node["fidelity"]``, ``node["fidelity_reason"]``)
and read by the node metrics (``node/rewrite_fidelity``) and the first failing node. Offline, the
score is the share of the question's content units the query still holds
(:func:`~ragtrack.text.overlap_units`; a number the query lost caps it at half).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from ragtrack.evaluation.judges import VERDICT_SCHEMA, Verdict, parse_verdict
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import Step
from ragtrack.llm.client import LLM
from ragtrack.records import JudgeRecord
from ragtrack.text import chat_messages, overlap_units

STEP = "judge.rewrite_fidelity"
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class FidelityInput:
    question: str
    rewrite: str  # what the rewrite node produced


@dataclass(frozen=True)
class FidelityVerdict:
    """The judge's verdict on one item's rewrite (an error record when it could not be read) and its cost."""

    verdict: JudgeRecord
    usage: Usage


def kept_share(question: str, rewrite: str) -> float:
    """The share of the question's content units the rewrite still holds; at most half when it lost a
    number of the question (a changed value is a changed question)."""
    units = overlap_units(question)
    share = len(units & overlap_units(rewrite)) / len(units) if units else 1.0
    if any(n not in rewrite for n in _NUMBER.findall(question)):
        share = min(share, 0.5)
    return share


def heuristic(inp: FidelityInput, language: str) -> Verdict:
    """1–5 from :func:`kept_share`: all kept 5, at least 80 % 4, 60 % 3, 40 % 2, less 1."""
    share = kept_share(inp.question, inp.rewrite)
    score = 5 if share >= 1 else 4 if share >= 0.8 else 3 if share >= 0.6 else 2 if share >= 0.4 else 1
    if language == "zh":
        return Verdict(score, f"改写保留了问题 {share:.0%} 的内容词")
    return Verdict(score, f"the rewrite keeps {share:.0%} of the question's content words")


@dataclass
class FidelityStep(Step[FidelityInput, Verdict]):
    language: str = "en"

    def messages(self, inp: FidelityInput) -> list[dict[str, str]]:
        return chat_messages(self.prompt, question=inp.question, rewrite=inp.rewrite or "(empty query)")

    def parse(self, text: str) -> Verdict:
        return parse_verdict(text)

    def offline(self, inp: FidelityInput) -> Verdict:
        return heuristic(inp, self.language)


def fidelity_step(language: str, max_tokens: int = 160) -> FidelityStep:
    prompt = resources.files("ragtrack.evaluation").joinpath(f"prompts/{language}/rewrite_fidelity.md")
    return FidelityStep(
        STEP,
        prompt.read_text("utf-8"),
        max_tokens=max_tokens,
        temperature=0.0,
        json_schema=VERDICT_SCHEMA,
        language=language,
    )


def judge_fidelity(llm: LLM, step: FidelityStep, inp: FidelityInput) -> FidelityVerdict:
    """One verdict; a reply that cannot be read is an error record (counted, never a score)."""
    result = llm.run(step, inp)
    usage = Usage()
    usage.add(result.usage)
    if not result.ok:
        return FidelityVerdict(JudgeRecord(None, None, "", error=result.error, raw=result.raw), usage)
    return FidelityVerdict(JudgeRecord(result.value.score, result.value.normalized, result.value.reason), usage)
