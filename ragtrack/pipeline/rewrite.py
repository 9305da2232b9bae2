"""v5: multi-query rewriting — the user's words rarely match the documents' words.

With an LLM, the question is rephrased into several queries with different
wording and focus. Offline, two deterministic variants: the question reduced to
its content words, and a pseudo-relevance-feedback expansion (the question plus
the most distinctive words of its top BM25 hits), a classic recall fix.

A follow-up ("And its price?", "那它的价格呢？") names its subject by reference to
the turns before it. Rewriting resolves it first (:func:`resolve_follow_up`):
offline, by a documented heuristic; with an LLM, the rewrite prompt reads the
earlier turns with the question and its queries are standalone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragtrack.agent import transcript
from ragtrack.llm.base import Step
from ragtrack.llm.jsonparse import string_list
from ragtrack.text import chat_messages, content_tokens, is_chinese

if TYPE_CHECKING:
    from ragtrack.golden import Turn

REWRITE_SCHEMA = {
    "type": "object",
    "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
    "required": ["queries"],
}


@dataclass
class RewriteStep(Step[str, tuple[str, ...]]):
    n: int = 2
    # Offline only: question → expansion words from its top BM25 hits.
    expand: Callable[[str], list[str]] | None = field(default=None, repr=False)

    def messages(self, question: str) -> list[dict[str, str]]:
        return chat_messages(self.prompt, question=question, n=str(self.n))

    def parse(self, text: str) -> tuple[str, ...]:
        return string_list(text, "queries", self.n)

    def offline(self, question: str) -> tuple[str, ...]:
        words = content_tokens(question)
        variants = [" ".join(words)]
        if self.expand is not None:
            extra = [w for w in self.expand(question) if w not in words]
            variants.append(" ".join([*words, *extra]))
        return tuple(v for v in dict.fromkeys(variants) if v and v != question)[: self.n]


def resolve_follow_up(question: str, history: Sequence[Turn]) -> str:
    """A follow-up made standalone, offline: the content words of the last user turn that the question
    does not already hold are put before it ("How do I install it?" after "What is ComfyUI-Manager?"
    → "comfyui-manager How do I install it?"). The subject of a follow-up is nearly always the previous
    question's; the words go first so that a lexical retriever and the extractive generator weigh them
    as the question's own. Without a user turn the question is returned as it is."""
    previous = next((t.content for t in reversed(history) if t.role == "user"), "")
    own = set(content_tokens(question))
    carried = [w for w in dict.fromkeys(content_tokens(previous)) if w not in own]
    if not carried:
        return question
    return ("".join(carried) if is_chinese(question) else " ".join(carried)) + " " + question


def with_history(question: str, history: Sequence[Turn]) -> str:
    """What an LLM rewrite reads for a follow-up: the earlier turns, then the question to make standalone
    (the prompt's ``{{question}}`` slot, so a version's prompt file is the same with and without)."""
    return f"{transcript(history)}\nuser (the follow-up to rewrite as a standalone question): {question}"


#: Words by which a question points back at an earlier turn instead of naming its subject.
_REFERRING = re.compile(
    r"\b(?:it|its|they|them|their|this|that|these|those|one|ones)\b|它|他们|她们|它们|这个|那个|这些|那些|该|其|此|那",
    re.IGNORECASE,
)


def looks_like_follow_up(question: str) -> bool:
    """Whether a question asked inside a conversation leans on the turns before it: it points back
    ("How do I install it?", "那它的价格呢？") or names almost nothing itself (two content words or fewer).
    A golden item with history is a follow-up by definition; production traffic needs this test,
    since most later turns of a conversation are questions of their own."""
    return bool(_REFERRING.search(question)) or len(content_tokens(question)) <= 2
