"""A production message's place in its conversation: the turns before it.

Platforms log each answered message with its conversation (Dify's ``conversation_id``, a RAGFlow
session, an MLflow session, a JSONL export's ``conversation_id``). The turns before a message are the
earlier messages of the same app's conversation, oldest first (by the time they were answered, then
by ID), each a user question and the app's answer. A follow-up disliked in production then becomes a
golden candidate with that ``history``, so it can be asked again as it was asked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ragtrack.golden import Turn
from ragtrack.production.messages import ProductionMessage


def earlier_turns(messages: Iterable[ProductionMessage]) -> dict[tuple[str, str, str], tuple[Turn, ...]]:
    """Message key → the turns of its conversation before it (empty for a first turn, or a message
    logged without a conversation)."""
    conversations: dict[tuple[str, str, str], list[ProductionMessage]] = defaultdict(list)
    out: dict[tuple[str, str, str], tuple[Turn, ...]] = {}
    for m in messages:
        if m.conversation_id:
            conversations[(m.source, m.app, m.conversation_id)].append(m)
        else:
            out[m.key] = ()
    for turns in conversations.values():
        turns.sort(key=lambda m: (m.created_at, m.message_id))
        history: list[Turn] = []
        for m in turns:
            out[m.key] = tuple(history)
            history.append(Turn(role="user", content=m.question))
            if m.answer.strip():
                history.append(Turn(role="assistant", content=m.answer))
    return out
