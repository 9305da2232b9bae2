"""Generation: contexts + question → answer (optionally via an outline, v4).

With an LLM, the version's prompt template is filled and sent. Offline, the
answer is *extractive*: the retrieved sentences closest to the question,
kept in reading order — no invented words, so it is grounded by construction
and its quality moves only with retrieval. Runs record which one was used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import ParseError, Step
from ragtrack.pipeline.embedding import Embedder
from ragtrack.pipeline.qa_pairs import answer_part

if TYPE_CHECKING:
    from ragtrack.llm.client import LLM
    from ragtrack.pipeline.chunking import Chunk
    from ragtrack.pipeline.spec import VersionSpec
from ragtrack.text import chat_messages, format_contexts, join_sentences, language_of, split_sentences


@dataclass(frozen=True)
class AnswerInput:
    question: str
    contexts: tuple[str, ...]
    outline: tuple[str, ...] = ()


def answer_sentences(context: str) -> list[str]:
    """The sentences an offline answer may take from a context: of a Q&A pair (v2), its answer's only —
    an answer made of the pair's own question answers nothing."""
    return split_sentences(answer_part(context))


def closest_sentences(
    embedder: Embedder, query: str, contexts: tuple[str, ...], k: int, exclude: set[str] = frozenset()
) -> list[tuple[int, int, str]]:
    """Up to ``k`` (context index, position, sentence) closest to ``query`` by cosine."""
    candidates = [
        (ci, si, s) for ci, ctx in enumerate(contexts) for si, s in enumerate(answer_sentences(ctx)) if s not in exclude
    ]
    if not candidates:
        return []
    q = embedder.encode([query])[0]
    scores = embedder.encode([s for _, _, s in candidates], keep=True) @ q
    picked, seen = [], set()
    for i in np.argsort(-scores, kind="stable"):
        sentence = candidates[i][2]
        if sentence.lower() not in seen:
            seen.add(sentence.lower())
            picked.append(candidates[i])
        if len(picked) == k:
            break
    return picked


#: The offline answer when no retrieved sentence fits, in the question's language.
NO_ANSWER = {"en": "The retrieved contexts do not answer this.", "zh": "检索到的内容回答不了这个问题。"}


@dataclass
class AnswerStep(Step[AnswerInput, str]):
    """Write the final answer from the retrieved contexts (and an outline, when given)."""

    embedder: Embedder | None = field(default=None, repr=False)
    max_sentences: int = 4
    cite: bool = False  # offline: mark each sentence with the number of the context it was taken from

    def messages(self, inp: AnswerInput) -> list[dict[str, str]]:
        return chat_messages(
            self.prompt,
            question=inp.question,
            contexts=format_contexts(inp.contexts),
            outline="\n".join(f"- {h}" for h in inp.outline),
        )

    def parse(self, text: str) -> str:
        text = text.strip()
        if not text:
            raise ParseError("empty answer")
        return text

    def _sentence(self, picked: tuple[int, int, str]) -> str:
        """A picked sentence as the answer says it: with ``[n]`` (its context's number) when citing,
        written before the sentence's closing mark."""
        ci, _, sentence = picked
        if not self.cite:
            return sentence
        marker = f"[{ci + 1}]"
        if sentence.endswith(("。", "！", "？", "；")):
            return sentence[:-1] + marker + sentence[-1]
        if sentence.endswith((".", "!", "?")):
            return f"{sentence[:-1]} {marker}{sentence[-1]}"
        return f"{sentence} {marker}"

    def offline(self, inp: AnswerInput) -> str:
        if not inp.outline:
            picked = closest_sentences(self.embedder, inp.question, inp.contexts, self.max_sentences)
            language = language_of(inp.question)
            return join_sentences((self._sentence(p) for p in sorted(picked)), language) or NO_ANSWER[language]
        # Outline-led: one paragraph per outline point, in the outline's order, each the
        # sentence closest to that point and the question, never reusing a sentence.
        queries = [f"{inp.question} {point}" for point in inp.outline[: self.max_sentences]]
        self.embedder.encode(queries)  # one batch; closest_sentences below finds them encoded
        used: set[str] = set()
        paragraphs = []
        for query in queries:
            best = closest_sentences(self.embedder, query, inp.contexts, 1, used)
            if best:
                used.add(best[0][2])
                paragraphs.append(self._sentence(best[0]))
        return "\n\n".join(paragraphs) or NO_ANSWER[language_of(inp.question)]


@dataclass(frozen=True)
class OutlineInput:
    question: str
    topics: tuple[tuple[str, ...], ...]  # per retrieved parent, its free topics


@dataclass
class OutlineStep(Step[OutlineInput, tuple[str, ...]]):
    """v4: draft an answer outline from the free topics of the retrieved parents."""

    embedder: Embedder | None = field(default=None, repr=False)
    max_points: int = 4

    def messages(self, inp: OutlineInput) -> list[dict[str, str]]:
        listing = "\n".join(f"[{n}] {', '.join(t)}" for n, t in enumerate(inp.topics, start=1))
        return chat_messages(self.prompt, question=inp.question, topics=listing or "(none)")

    def parse(self, text: str) -> tuple[str, ...]:
        points = [re.sub(r"^\s*(?:[-*+]|\d+[.)])\s*", "", line).strip() for line in text.splitlines()]
        points = [p for p in points if p and not p.endswith(":")]
        if not points:
            raise ParseError("no outline points (expected one point per line)")
        return tuple(points[: self.max_points])

    def offline(self, inp: OutlineInput) -> tuple[str, ...]:
        """The distinct topics, ordered by closeness to the question."""
        topics = list(dict.fromkeys(t for group in inp.topics for t in group))
        if not topics:
            return ()
        q = self.embedder.encode([inp.question])[0]
        scores = self.embedder.encode(topics, keep=True) @ q
        order = np.argsort(-scores, kind="stable")[: self.max_points]
        return tuple(topics[i] for i in order)


@dataclass
class Generation:
    answer: str = ""
    outline: tuple[str, ...] = ()
    answered: bool = True  # False: the answer step failed (its error is in ``errors``)
    errors: list[str] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)

    def run(self, llm: LLM, step: Step, inp: object) -> object | None:
        """Run one step, keeping its usage and, when it fails, its error; returns its value (None on error)."""
        result = llm.run(step, inp)
        self.usage[step.name] = result.usage
        if not result.ok:
            self.errors.append(f"{step.name}: {result.error}")
        return result.value


class DirectGenerator:
    """Contexts + question → answer, in one step."""

    def __init__(self, llm: LLM, spec: VersionSpec, prompt: Callable[[str], str], embedder: Embedder):
        self.llm = llm
        self.answer_step = AnswerStep(
            "answer",
            prompt("answer"),
            max_tokens=spec.llm.max_tokens.answer,
            temperature=spec.llm.temperature,
            embedder=embedder,
            max_sentences=spec.generation.max_sentences,
            cite=spec.generation.cite,
        )

    def generate(self, question: str, contexts: list[Chunk]) -> Generation:
        return self._answer(question, contexts, Generation())

    def _answer(self, question: str, contexts: list[Chunk], out: Generation) -> Generation:
        inp = AnswerInput(question, tuple(c.text for c in contexts), out.outline)
        answer = out.run(self.llm, self.answer_step, inp)
        out.answer, out.answered = answer or "", answer is not None
        return out


class OutlineGenerator(DirectGenerator):
    """v4: an outline drafted from the retrieved units' topics first, then an answer that follows it."""

    def __init__(self, llm: LLM, spec: VersionSpec, prompt: Callable[[str], str], embedder: Embedder):
        super().__init__(llm, spec, prompt, embedder)
        self.outline_step = OutlineStep(
            "outline",
            prompt("outline"),
            max_tokens=spec.llm.max_tokens.outline,
            temperature=spec.llm.temperature,
            embedder=embedder,
        )

    def generate(self, question: str, contexts: list[Chunk]) -> Generation:
        out = Generation()
        topics = tuple(tuple(c.metadata.get("topics", ())) for c in contexts)
        out.outline = out.run(self.llm, self.outline_step, OutlineInput(question, topics)) or ()
        return self._answer(question, contexts, out)
