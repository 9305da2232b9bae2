"""v5: multi-query rewriting — the user's words rarely match the documents' words.

With an LLM, the question is rephrased into several queries with different
wording and focus. Offline, two deterministic variants: the question reduced to
its content words, and a pseudo-relevance-feedback expansion (the question plus
the most distinctive words of its top BM25 hits), a classic recall fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ragtrack.llm.base import Step
from ragtrack.llm.jsonparse import string_list
from ragtrack.text import chat_messages, content_tokens

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
