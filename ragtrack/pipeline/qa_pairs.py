"""v2: rewrite every section into self-contained question/answer pairs, then index the pairs.

The pairs read well on their own, which fixed v1's fragments — and lose what
the pairs leave out (the seeds' "breadth and depth" problem). Each pair keeps
the passage it came from as provenance, so it is scored on canonical IDs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragtrack.corpus import Passage
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.jsonparse import extract_json
from ragtrack.pipeline.chunking import Chunk, UnitContext, Units

if TYPE_CHECKING:
    from ragtrack.pipeline.spec import QAPairsChunking
from ragtrack.text import chat_messages

#: Bump when :meth:`QAPairsStep.offline` writes other pairs: cached v2 indexes are keyed by it
#: (2: Chinese questions, joined without spaces, for Chinese text; 3: no table rows or heading line
#: while a section has prose).
OFFLINE_PAIRS = 3

_PAIR = re.compile(r"Q: [^\n]*\nA: (?P<answer>.*)", re.DOTALL)


def qa_text(question: str, answer: str) -> str:
    """A pair as its unit's text: what is indexed, and what a generator is handed."""
    return f"Q: {question}\nA: {answer}"


def answer_part(text: str) -> str:
    """The answer of a pair's text (:func:`qa_text`); any other text as it is."""
    pair = _PAIR.fullmatch(text)
    return pair.group("answer") if pair else text


QA_SCHEMA = {
    "type": "object",
    "properties": {
        "pairs": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"question": {"type": "string"}, "answer": {"type": "string"}},
                "required": ["question", "answer"],
            },
        }
    },
    "required": ["pairs"],
}


@dataclass
class QAPairsStep(Step[Passage, tuple[tuple[str, str], ...]]):
    pairs_per_section: int = 3
    language: str = "en"  # of the corpus: the offline pairs' questions are written in it

    def messages(self, passage: Passage) -> list[dict[str, str]]:
        return chat_messages(self.prompt, title=passage.title, text=passage.text, n=str(self.pairs_per_section))

    def parse(self, text: str) -> tuple[tuple[str, str], ...]:
        data = extract_json(text)
        pairs = data.get("pairs") if isinstance(data, dict) else data
        if not isinstance(pairs, list):
            raise ParseError("expected {'pairs': [{'question', 'answer'}, ...]}")
        out = tuple(
            (str(p["question"]).strip(), str(p["answer"]).strip())
            for p in pairs
            if isinstance(p, dict) and str(p.get("question", "")).strip() and str(p.get("answer", "")).strip()
        )
        if not out:
            raise ParseError("no usable question/answer pairs")
        return out[: self.pairs_per_section]

    def offline(self, passage: Passage) -> tuple[tuple[str, str], ...]:
        """Heading-derived questions answered by consecutive sentences of the section.

        Like an LLM pass, it keeps the gist and drops the rest: a section
        longer than ``pairs_per_section`` × 2 sentences loses its tail.
        """
        topic = passage.heading_path[-1] if passage.heading_path else passage.title or passage.doc_id
        context = " / ".join(passage.heading_path[:-1])
        sentences = passage.statements()
        zh = self.language == "zh"
        pairs = []
        for n in range(self.pairs_per_section):
            answer = ("" if zh else " ").join(sentences[2 * n : 2 * n + 2])
            if not answer:
                break
            if zh:
                about = f"{topic}（{context}）" if context else topic
                question = f"关于{about}，需要了解什么？" if n == 0 else f"关于{about}，还有什么要注意？"
            else:
                about = f"{topic} ({context})" if context else topic
                question = f"What should I know about {about}?" if n == 0 else f"What else matters about {about}?"
            pairs.append((question, answer))
        return tuple(pairs)


def qa_units(ctx: UnitContext, params: QAPairsChunking) -> Units:
    """One chunk per generated pair; a section whose step failed contributes none (counted by the LLM)."""
    step = QAPairsStep(
        "qa_pairs",
        ctx.prompt("qa_pairs"),
        max_tokens=ctx.llm_spec.max_tokens.qa_pairs,
        temperature=ctx.llm_spec.temperature,
        json_schema=QA_SCHEMA,
        pairs_per_section=params.pairs_per_section,
        language=ctx.corpus.language,
    )
    chunks = []
    passages = list(ctx.corpus.passages.values())
    for passage, result in zip(passages, ctx.llm.map(step, passages), strict=True):
        for n, (question, answer) in enumerate(result.value or ()):
            chunks.append(
                Chunk(
                    id=f"{passage.id}::qa{n}",
                    text=qa_text(question, answer),
                    doc_id=passage.doc_id,
                    passage_ids=(passage.id,),
                    metadata={"question": question},
                )
            )
    return Units(chunks)
