"""Pulling: a source's batches → production traces, incrementally and idempotently.

For each batch a source reads, the pull maps every message's contexts to canonical passages (the
ID table first, then the text: :class:`~ragtrack.agents.mapping.ContextMapper`, as for an external
agent's contexts), hashes the end user with the project's secret, removes secret values from the
texts, stores the messages the store does not hold yet, brings the rating of those it does hold up
to date (a like turned dislike overrides its assessment; a rating withdrawn is removed), and only
then saves the source's cursor. So a pull killed at any point loses nothing and duplicates
nothing: the next one starts from the last saved cursor, and what was already stored is
recognised by its (source, app, message ID).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ragtrack.agents.mapping import ContextMapper
from ragtrack.errors import RagtrackError
from ragtrack.files import atomic_write_json, read_text
from ragtrack.production.messages import Coverage, ProductionMessage, hash_user
from ragtrack.production.sources import PulledMessage, Source, UserFeedback
from ragtrack.records import ContextRecord
from ragtrack.secrets import redact
from ragtrack.tracking.production import ProductionLog, Stored


@dataclass
class PullReport:
    """What one pull did. ``pulled``: items the platform returned; ``new``: messages stored for the
    first time; ``updated``: stored messages whose rating changed; ``unresolved``: reason → how many
    feedbacks or messages could not be read. ``stored`` / ``liked`` / ``disliked``: the source's
    messages in the store afterwards."""

    source: str
    app: str
    experiment: str
    coverage: Coverage
    cursor_path: Path
    resumed: bool = False
    pulled: int = 0
    new: int = 0
    updated: int = 0
    unresolved: Counter[str] = field(default_factory=Counter)
    stored: int = 0
    liked: int = 0
    disliked: int = 0
    apps: list[str] = field(default_factory=list)  # every app / version its messages are stored under


def pull(
    source: Source,
    log: ProductionLog,
    mapper: ContextMapper,
    salt: str,
    cursor_path: Path,
    progress: Callable[[str], None] = lambda line: None,
) -> PullReport:
    """Read ``source`` from its saved cursor and store what it finds (see the module docstring)."""
    cursor = load_cursor(cursor_path)
    report = PullReport(source.name, source.app, log.experiment_name, source.coverage, cursor_path, bool(cursor))
    indexes: dict[str, dict[str, Stored]] = {}

    def index(app: str) -> dict[str, Stored]:
        if app not in indexes:
            indexes[app] = log.index(source.name, app)
        return indexes[app]

    fresh: set[tuple[str, str]] = set()  # (app, message ID) written by this pull
    for batch in source.batches(cursor, lambda message_id: message_id in index(source.app), progress):
        report.pulled += batch.pulled
        report.unresolved.update(batch.unresolved)
        new: list[ProductionMessage] = []
        for pulled in batch.messages:
            message = _message(pulled, source, mapper, salt)
            held = index(message.app).get(message.message_id)
            if held is None:
                if (message.app, message.message_id) not in fresh:
                    new.append(message)
                    fresh.add((message.app, message.message_id))
            elif _changed(held, message.rating, message.comment):
                index(message.app)[message.message_id] = log.rate(
                    held, message.rating, message.comment, message.rated_at
                )
                report.updated += 1
        for message, trace_id in zip(new, log.write(new), strict=True):
            index(message.app)[message.message_id] = Stored(
                trace_id, message.rating, message.comment, None, message.user
            )
        report.new += len(new)
        if batch.ratings is not None:
            report.updated += _rerate(log, index(source.app), batch.ratings, {m for a, m in fresh if a == source.app})
        if new or batch.cursor is not None:
            progress(f"stored {report.new} new, {report.updated} re-rated")
        if batch.cursor is not None:
            cursor = batch.cursor
            atomic_write_json(cursor_path, cursor)
    for app in sorted(indexes):
        held = indexes[app]
        if held:
            report.apps.append(app)
        report.stored += len(held)
        report.liked += sum(s.rating == "like" for s in held.values())
        report.disliked += sum(s.rating == "dislike" for s in held.values())
    return report


def load_cursor(path: Path) -> dict:
    """The cursor a previous pull saved ({} before the first, or when the file is unreadable: the
    store still recognises what was pulled, so starting over costs requests, never duplicates)."""
    try:
        data = json.loads(read_text(path))
    except (RagtrackError, ValueError):  # missing, unreadable, not JSON
        return {}
    return data if isinstance(data, dict) else {}


def _message(pulled: PulledMessage, source: Source, mapper: ContextMapper, salt: str) -> ProductionMessage:
    """A pulled message as it is stored: contexts mapped, user hashed, secrets out of every text."""
    contexts = []
    for c in pulled.contexts:
        mapped = mapper.map(replace(c, text=redact(c.text)))
        contexts.append(
            ContextRecord(mapped.unit_id, mapped.text, list(mapped.passage_ids), mapped.score, mapped.mapping)
        )
    feedback = pulled.feedback
    return ProductionMessage(
        message_id=pulled.message_id,
        source=source.name,
        app=pulled.app or source.app,
        question=redact(pulled.question),
        answer=redact(pulled.answer),
        created_at=pulled.created_at,
        contexts=contexts,
        conversation_id=pulled.conversation_id,
        user=hash_user(pulled.user, salt),
        rating=feedback.rating if feedback else None,
        comment=redact(feedback.comment) if feedback and feedback.comment else None,
        rated_at=feedback.rated_at if feedback else None,
        coverage=source.coverage,
    )


def _changed(held: Stored, rating: str | None, comment: str | None) -> bool:
    return (held.rating, held.comment or None) != (rating, comment or None)


def _rerate(log: ProductionLog, held: dict[str, Stored], ratings: dict[str, UserFeedback], fresh: set[str]) -> int:
    """Bring every stored message of the source's app to the rating ``ratings`` gives it (none: no
    rating): a source that reads ratings apart from messages re-rates what it did not read again."""
    changed = 0
    for message_id, stored in list(held.items()):
        if message_id in fresh:
            continue  # written by this pull with the rating it has now
        feedback = ratings.get(message_id)
        rating = feedback.rating if feedback else None
        comment = redact(feedback.comment) if feedback and feedback.comment else None
        if _changed(stored, rating, comment):
            held[message_id] = log.rate(stored, rating, comment, feedback.rated_at if feedback else None)
            changed += 1
    return changed
