"""Step 3 of the SOP: fuse the GT passages into the GT answer.

With an LLM, the answer's structure follows the material (one fact, steps, a
comparison, a chain of clues) and holds only facts from the passages. Offline,
the answer is *extractive*: from each GT passage, the sentences that share the
most with the question, in passage order — faithful by construction, not fused,
and the command says so. A follow-up's earlier turns go before the question (the
offline answer does not read them: its sentences come from the passages).
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrack.authoring import conversation, labelled_passages
from ragtrack.corpus import Passage
from ragtrack.golden import Turn
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.jsonparse import extract_json
from ragtrack.text import chat_messages, join_sentences, overlap_units

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
SENTENCES_PER_PASSAGE = 2


@dataclass(frozen=True)
class AnswerInput:
    question: str
    passages: tuple[Passage, ...]
    language: str
    history: tuple[Turn, ...] = ()  # a follow-up's earlier turns


def parse_answer(text: str) -> str:
    """``{"answer": "..."}`` from a reply (untrusted); an empty or missing answer is a parse error."""
    data = extract_json(text)
    answer = data.get("answer") if isinstance(data, dict) else None
    if not isinstance(answer, str) or not answer.strip():
        raise ParseError('expected {"answer": "<non-empty text>"}')
    return answer.strip()


def extractive_answer(question: str, passages: tuple[Passage, ...], language: str) -> str:
    """Per passage, its sentences sharing most with the question (at least one, at most two), in order.

    Sentences are :meth:`Passage.statements` (no table rows or heading line while there is prose),
    joined as :func:`~ragtrack.text.join_sentences` joins them."""
    wanted = overlap_units(question)
    picked = []
    for p in passages:
        sentences = p.statements()
        shared = [len(overlap_units(s) & wanted) for s in sentences]
        ranked = sorted(range(len(sentences)), key=lambda n: (-shared[n], n))
        best = ranked[:1] + [n for n in ranked[1:SENTENCES_PER_PASSAGE] if shared[n]]
        picked += [sentences[n] for n in sorted(best)]
    return join_sentences(picked, language)


@dataclass
class AnswerStep(Step[AnswerInput, str]):
    """The GT answer from the GT passages; offline, extracted from them."""

    def messages(self, inp: AnswerInput) -> list[dict[str, str]]:
        return chat_messages(
            self.prompt,
            question=inp.question,
            passages=labelled_passages(inp.passages),
            history=conversation(inp.history, inp.language),
        )

    def parse(self, text: str) -> str:
        return parse_answer(text)

    def offline(self, inp: AnswerInput) -> str:
        return extractive_answer(inp.question, inp.passages, inp.language)
