"""Pulling: a source's batches → production traces, incrementally and idempotently.

For each batch a source reads, the pull maps every message's contexts to canonical passages (the
ID table first, then the text: :class:`~ragtrack.agents.mapping.ContextMapper`, as for an external
agent's contexts), hashes the end user with the project's secret, removes secret values from the
texts, stores the messages the store does not hold yet, brings the rating of those it does hold up
to date (a like turned dislike overrides its assessment; a rating withdrawn is removed), and only
then saves the source's cursor. So a pull killed at any point loses nothing and duplicates
nothing: the next one starts from the last saved cursor, and what was already stored is
recognised by its (source, app, message ID).

A source hands over a conversation (Dify) or a page of sessions (RAGFlow) as one batch, its
messages oldest first: they are written in that order, in chunks the store takes at its own pace
(:meth:`~ragtrack.tracking.production.ProductionLog.write`, each verified), and the cursor that
marks the batch done is saved only after the last chunk. A pull killed half way through a batch
leaves the batch unmarked, so the next reads that conversation whole and writes what is missing,
wherever the gaps are. A reply the source cannot read stops the pull before anything of its batch
is written; ratings are brought up to date only from a complete, well-formed listing.

One pull of a source and app at a time in a project: a second refuses at once (a lock beside the
cursor; two at once stored 185 traces for 97 messages).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ragtrack.agents.mapping import ContextMapper, PlatformContext
from ragtrack.agents.workflow import Node
from ragtrack.errors import RagtrackError
from ragtrack.files import atomic_write_json, hold_lock, read_text, release_lock
from ragtrack.production.messages import Coverage, ProductionMessage, hash_user
from ragtrack.production.sources import PulledMessage, Source, UserFeedback
from ragtrack.records import ContextRecord, StageRecord
from ragtrack.secrets import redact
from ragtrack.tracking.production import ProductionLog, Stored
from ragtrack.tracking.trace_writer import batches

#: New messages gathered before they are written (a trace batch at a time): every write ends in a
#: search that reads its traces back, so one write per message made a pull of 300 take minutes.
WRITE_BATCH = 200


@dataclass
class PullReport:
    """What one pull did. ``pulled`` / ``feedbacks``: the messages and feedback records the platform
    returned; ``new``: messages stored for the first time; ``updated``: stored messages whose rating
    changed; ``unresolved``: reason → how many feedbacks or messages could not be read. ``stored`` /
    ``liked`` / ``disliked``: the source's messages in the store afterwards."""

    source: str
    app: str
    experiment: str
    coverage: Coverage
    cursor_path: Path
    resumed: bool = False
    pulled: int = 0
    feedbacks: int = 0
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
    holder = hold_lock(
        f"{cursor_path}.lock",
        f"another pull of {source.name} {source.app} is running in this project (it holds {cursor_path}.lock); "
        "wait for it to finish, then pull again",
    )
    try:
        return _pull(source, log, mapper, salt, cursor_path, progress)
    finally:
        release_lock(holder)


def _pull(
    source: Source,
    log: ProductionLog,
    mapper: ContextMapper,
    salt: str,
    cursor_path: Path,
    progress: Callable[[str], None],
) -> PullReport:
    cursor = load_cursor(cursor_path)
    report = PullReport(source.name, source.app, log.experiment_name, source.coverage, cursor_path, bool(cursor))
    indexes: dict[str, dict[str, Stored]] = {}
    mapping = _Mapping(mapper)

    def index(app: str) -> dict[str, Stored]:
        if app not in indexes:
            indexes[app] = log.index(source.name, app)
        return indexes[app]

    fresh: set[tuple[str, str]] = set()  # (app, message ID) stored, or to be stored, by this pull
    pending: list[ProductionMessage] = []  # new messages not written yet: one store write per WRITE_BATCH
    unsaved: dict | None = None  # the cursor to save once ``pending`` is in the store

    def store() -> None:
        nonlocal unsaved
        for chunk in batches(pending):  # oldest first, each chunk in the store before the next
            for message, trace_id in zip(chunk, log.write(chunk), strict=True):
                index(message.app)[message.message_id] = Stored(
                    trace_id, message.rating, message.comment, None, message.user
                )
            report.new += len(chunk)
            progress(f"stored {report.new} new messages, {report.updated} re-rated")
        pending.clear()
        if unsaved is not None:
            atomic_write_json(cursor_path, unsaved)
            unsaved = None

    def known(message_id: str) -> bool:
        return message_id in index(source.app) or (source.app, message_id) in fresh

    for batch in source.batches(cursor, known, progress):
        report.pulled += batch.pulled
        report.feedbacks += batch.feedbacks
        report.unresolved.update(batch.unresolved)
        for pulled in batch.messages:
            message = _message(pulled, source, mapping, salt)
            held = index(message.app).get(message.message_id)
            if held is None and (message.app, message.message_id) not in fresh:
                pending.append(message)
                fresh.add((message.app, message.message_id))
            elif held is not None and _changed(held, message.rating, message.comment):
                index(message.app)[message.message_id] = log.rate(
                    held, message.rating, message.comment, message.rated_at
                )
                report.updated += 1
        if batch.ratings is not None:
            store()  # what the ratings cover must be in the index first
            fresh_here = {m for a, m in fresh if a == source.app}
            report.updated += _rerate(log, index(source.app), batch.ratings, fresh_here, batch.ratings_complete)
        if batch.cursor is not None:
            unsaved = batch.cursor
        if len(pending) >= WRITE_BATCH or (unsaved is not None and not pending):
            store()
    store()
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


class _Mapping:
    """Contexts → canonical passages, each distinct segment located once per pull (an app retrieves the
    same few hundred segments again and again, and locating a text is the slow part of a pull)."""

    def __init__(self, mapper: ContextMapper):
        self.mapper = mapper
        self.seen: dict[PlatformContext, ContextRecord] = {}

    def __call__(self, c: PlatformContext) -> ContextRecord:
        key = replace(c, text=redact(c.text), score=None)
        if key not in self.seen:
            m = self.mapper.map(key)
            self.seen[key] = ContextRecord(m.unit_id, m.text, list(m.passage_ids), None, m.mapping)
        return replace(self.seen[key], passage_ids=list(self.seen[key].passage_ids), score=c.score)


def _message(pulled: PulledMessage, source: Source, mapping: _Mapping, salt: str) -> ProductionMessage:
    """A pulled message as it is stored: contexts mapped, user hashed, secrets out of every text."""
    contexts = [mapping(c) for c in pulled.contexts]
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
        stages=_stages(pulled, mapping),
    )


def _stages(pulled: PulledMessage, mapping: _Mapping) -> list[StageRecord]:
    """A workflow run's nodes as the stages an eval records, with the roles the source gave them, each
    retrieval node's contexts mapped, secrets out."""
    roles = pulled.roles

    def stage(n: Node) -> StageRecord:
        contexts = [mapping(c) for c in n.contexts or []]
        inputs, outputs = _redacted(n.inputs), _redacted(n.outputs)
        described = n.described(roles.get(n.title))
        if described.get("error"):
            described["error"] = redact(described["error"])
        return StageRecord(n.title, n.kind, n.start_ns, n.end_ns, inputs, outputs, contexts, described)

    return [stage(n) for n in pulled.nodes]


def _redacted(value):
    """Every text in a node's inputs or outputs with secret values out, however deep (an LLM node's
    inputs are its prompt messages, which may quote anything)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _changed(held: Stored, rating: str | None, comment: str | None) -> bool:
    return (held.rating, held.comment or None) != (rating, comment or None)


def _rerate(
    log: ProductionLog,
    held: dict[str, Stored],
    ratings: dict[str, UserFeedback],
    fresh: set[str],
    complete: bool = True,
) -> int:
    """Bring every stored message of the source's app to the rating ``ratings`` gives it (none: no
    rating): a source that reads ratings apart from messages re-rates what it did not read again. A
    listing with a record that could not be read (not ``complete``) withdraws nothing: only a
    well-formed listing that leaves a message out withdraws its rating."""
    changed = 0
    for message_id, stored in list(held.items()):
        if message_id in fresh:
            continue  # written by this pull with the rating it has now
        feedback = ratings.get(message_id)
        if feedback is None and not complete:
            continue
        rating = feedback.rating if feedback else None
        comment = redact(feedback.comment) if feedback and feedback.comment else None
        if _changed(stored, rating, comment):
            held[message_id] = log.rate(stored, rating, comment, feedback.rated_at if feedback else None)
            changed += 1
    return changed
