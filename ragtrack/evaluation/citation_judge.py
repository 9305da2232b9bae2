"""The judge part of the citation check: does a cited context support the sentence that cites it?

Asked only for the sentences the passage IDs cannot decide (:attr:`CitationScores.undecided`: every
marker names a context, none of them on GT). The question is ALCE's citation-recall check (Gao et al.,
2023), sentence by sentence: the sentence against the concatenation of the contexts it cites, answered
yes or no. Offline, a sentence is supported when most of its words (and every number) stand in one
cited context (:func:`~ragtrack.evaluation.heuristics.sentence_support`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from ragtrack.evaluation.heuristics import sentence_support
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.client import LLM
from ragtrack.llm.jsonparse import extract_json, without_reasoning
from ragtrack.text import chat_messages, format_contexts, overlap_units

SUPPORT_SCHEMA = {
    "type": "object",
    "properties": {"supported": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["supported", "reason"],
}
#: Offline: the share of a sentence's words one cited context must hold for it to count as supported.
SUPPORTED_SHARE = 0.6


@dataclass(frozen=True)
class SupportInput:
    sentence: str
    contexts: tuple[str, ...]  # the texts of the contexts it cites


@dataclass
class SupportStep(Step[SupportInput, bool]):
    language: str = "en"

    def messages(self, inp: SupportInput) -> list[dict[str, str]]:
        return chat_messages(self.prompt, sentence=inp.sentence, contexts=format_contexts(inp.contexts))

    def parse(self, text: str) -> bool:
        data = extract_json(without_reasoning(text))
        value = data.get("supported") if isinstance(data, dict) else None
        if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false"):
            return value.strip().lower() in ("yes", "true")
        if not isinstance(value, bool):
            raise ParseError("no boolean 'supported' in the reply")
        return value

    def offline(self, inp: SupportInput) -> bool:
        return sentence_support(inp.sentence, [(c, overlap_units(c)) for c in inp.contexts]) >= SUPPORTED_SHARE


def support_step(language: str, max_tokens: int = 160) -> SupportStep:
    prompt = resources.files("ragtrack.evaluation").joinpath(f"prompts/{language}/citation_support.md")
    return SupportStep(
        "judge.citation_support",
        prompt.read_text("utf-8"),
        max_tokens=max_tokens,
        temperature=0.0,
        json_schema=SUPPORT_SCHEMA,
        language=language,
    )


def judge_support(llm: LLM, step: SupportStep, asks: dict[int, SupportInput]) -> tuple[dict[int, bool], Usage, str]:
    """Verdicts for the sentences in ``asks`` (sentence index → what it cites), what they cost, and the
    first error ("" when every verdict came back; a sentence whose verdict failed is left out)."""
    usage, verdicts, error = Usage(), {}, ""
    for n, inp in asks.items():
        result = llm.run(step, inp)
        usage.add(result.usage)
        if result.ok:
            verdicts[n] = bool(result.value)
        elif not error:
            error = result.error or "no verdict"
    return verdicts, usage, error
