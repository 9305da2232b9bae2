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

A platform's reply is untrusted: a page is read only in a shape its API reference gives
(:func:`expect`; any other — a ``{"status": "maintenance"}`` with HTTP 200 — stops the pull with one
error naming the endpoint and the field, before anything from it is stored), and every paged listing
goes through a :class:`Pages` (a cap on pages, and a page that only repeats what was read stops it:
a server repeating one page forever once made a pull report 40,000 feedbacks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ragtrack.agents.mapping import PlatformContext
from ragtrack.agents.workflow import Node
from ragtrack.errors import RagtrackError
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
    nodes: list[Node] = field(default_factory=list)  # a workflow run's nodes, in the order they ran
    roles: dict[str, tuple[str, str]] = field(default_factory=dict)  # node title → (role, why)


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
    #: With ``ratings``: False when a feedback record of the listing could not be read (a field that is
    #: no value): the listing is then not a well-formed answer, so it withdraws no rating (it still adds
    #: and changes the ones it read).
    ratings_complete: bool = True
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


#: The most pages one listing is read to (Dify's and RAGFlow's pages hold 100: a million items): past
#: it a server is taken to be paging without end, and the pull stops.
MAX_PAGES = 10_000


class MalformedReply(RagtrackError):
    """A platform's reply in a shape its API reference does not give: the pull stops, storing nothing of it."""


def expect(value: Any, kinds: type | tuple[type, ...], where: str, field: str) -> Any:
    """``value`` when it is one of ``kinds``, else :class:`MalformedReply` naming ``where`` (the endpoint)
    and ``field``: a junk reply stops the pull instead of reading as "nothing there" (a ``{"data":
    "oops"}`` from ``/app/feedbacks`` once withdrew every rating in the store)."""
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _tuple(kinds)):
        return value
    names = " or ".join(_KIND.get(k, k.__name__) for k in _tuple(kinds))
    got = "nothing" if value is None else f"{_KIND.get(type(value), type(value).__name__)} {_clip(value)}"
    raise MalformedReply(
        f"{where}: malformed reply: {field} should be {names}, got {got} (not the shape of the platform's API "
        "reference; nothing from this pull's unfinished step was stored)"
    )


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


_KIND = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number", bool: "true/false"}
_KIND[type(None)] = "null"


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Pages:
    """One paged listing's guard: counts its pages (past ``cap``, :class:`MalformedReply`) and the item
    IDs read, and stops on a page holding only items already read — a server repeating a page, or
    ignoring the page parameter, would otherwise be paged until it gave up. Items that shift between
    pages as the listing changes under the pull (a new feedback on top) repeat only partly: the
    repeats are dropped, the rest read."""

    def __init__(self, where: str, cap: int | None = None):
        self.where, self.cap = where, cap or MAX_PAGES
        self.pages = 0
        self.seen: set[str] = set()

    def new(self, ids: list[str]) -> set[str]:
        """The IDs of this page not read before (raises on a page past the cap, or only of repeats)."""
        self.pages += 1
        if self.pages > self.cap:
            raise MalformedReply(
                f"{self.where}: still paging after {self.cap} pages; stopped (a server paging forever?)"
            )
        fresh = set(ids) - self.seen
        if ids and not fresh:
            raise MalformedReply(
                f"{self.where}: page {self.pages} only repeats items already read ({_clip(ids[0])}…); stopped "
                "(a server ignoring the page asked for?)"
            )
        self.seen |= fresh
        return fresh
