"""Where production conversations come from: one module per source, behind one registry of names.

A source reads one app's conversations through the platform's public API (or a file, or an MLflow
experiment) and hands the pull :class:`Batch` es of :class:`PulledMessage` — plain data, contexts as
the platform returned them, the end user as the platform names them. The pull maps the contexts to
canonical passages, hashes the user and stores what is new (:mod:`ragtrack.production.pull`); a
source never touches the store.

A source resumes from its cursor (a small JSON object it defines, saved by the pull after each
batch is stored) and may ask ``known(message_id)`` to stop paging where the store already holds
what follows. Messages a source could not read are counted in ``unresolved`` by reason, in words a
user can act on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ragtrack.agents.mapping import PlatformContext
from ragtrack.production.messages import SOURCES, Coverage, Rating
from ragtrack.registry import Registry

if TYPE_CHECKING:
    from ragtrack.config import ProjectConfig


@dataclass(frozen=True)
class UserFeedback:
    """An end user's rating of one message, with their comment."""

    rating: Rating
    comment: str | None = None
    rated_at: str | None = None  # ISO 8601, UTC


@dataclass
class PulledMessage:
    """One answered question as a source read it: before mapping, with the platform's user identifier."""

    message_id: str
    question: str
    answer: str
    created_at: str  # ISO 8601, UTC (messages.utc_iso)
    contexts: list[PlatformContext] = field(default_factory=list)
    conversation_id: str | None = None
    user: str | None = None  # the platform's identifier: hashed by the pull, never stored
    feedback: UserFeedback | None = None
    app: str | None = None  # the app / version that served it, when the source says (a JSONL app_version)


@dataclass
class Batch:
    """What a source read in one step: stored together, then ``cursor`` is saved (None: unchanged).

    ``ratings``: the source's complete view of the app's ratings (message ID → feedback), for a source
    that reads ratings apart from messages (Dify's ``/app/feedbacks``); a stored message it does not
    list has no rating any more. ``pulled`` / ``feedbacks``: the messages and the feedback records the
    platform returned in this step.
    """

    messages: list[PulledMessage] = field(default_factory=list)
    ratings: dict[str, UserFeedback] | None = None
    unresolved: Counter[str] = field(default_factory=Counter)
    cursor: dict | None = None
    pulled: int = 0
    feedbacks: int = 0


class Source(Protocol):
    """One app's conversations on one platform."""

    name: str  # a name of SOURCES
    app: str  # the app / version label its messages are stored under (a message may name its own)
    coverage: Coverage  # what part of the app's traffic it can see

    def batches(self, cursor: dict, known: Callable[[str], bool], progress: Callable[[str], None]) -> Iterator[Batch]:
        """The app's messages since ``cursor``, step by step; ``progress`` takes a line for stderr."""
        ...


@dataclass(frozen=True)
class SourceRequest:
    """What ``ragtrack logs pull`` was given: a version spec (dify, ragflow; mlflow to join Dify ratings),
    a file (jsonl), an experiment (mlflow) and where it lives, a label for the app."""

    config: ProjectConfig
    version: str | None = None
    path: str | None = None
    experiment: str | None = None
    source_uri: str | None = None
    app: str | None = None
    tracking_uri: str | None = None  # the project's store (--tracking-uri), the default source_uri


#: Source name → ``open(request) -> Source``: the names ``--from`` takes (unknown ones are refused),
#: each a module of this package; every name of ``SOURCES`` has one.
LOG_SOURCES: Registry[Callable[[SourceRequest], Source]] = Registry(
    "log source", {name: f"ragtrack.production.sources.{name}:open_source" for name in SOURCES}
)
