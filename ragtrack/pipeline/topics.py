"""v4: free topics per parent section, extracted once at index time.

The generator later drafts its outline from the topics of the parents it
retrieved, so the answer's structure follows the material instead of a fixed
template (the seeds' fix for v3's rigid answers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ragtrack.llm.base import Step
from ragtrack.llm.jsonparse import string_list
from ragtrack.pipeline.chunking import Chunk
from ragtrack.text import chat_messages, keywords

TOPICS_SCHEMA = {
    "type": "object",
    "properties": {"topics": {"type": "array", "items": {"type": "string"}}},
    "required": ["topics"],
}


@dataclass
class TopicsStep(Step[Chunk, tuple[str, ...]]):
    max_topics: int = 5
    # Offline only: corpus document frequencies, so topics are distinctive words, not common ones.
    document_frequency: Counter = field(default_factory=Counter, repr=False)
    n_docs: int = 1

    def messages(self, parent: Chunk) -> list[dict[str, str]]:
        return chat_messages(self.prompt, text=parent.text, n=str(self.max_topics))

    def parse(self, text: str) -> tuple[str, ...]:
        return string_list(text, "topics", self.max_topics)

    def offline(self, parent: Chunk) -> tuple[str, ...]:
        """Sub-headings of the parent, then its most distinctive keywords (TF-IDF)."""
        headings = [line.lstrip("#").strip() for line in parent.text.split("\n")[1:] if line.startswith("#")]
        words = keywords(parent.text, self.max_topics, self.document_frequency, self.n_docs)
        return tuple(dict.fromkeys([*headings, *words]))[: self.max_topics]
