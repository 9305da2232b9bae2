"""The conversations a loopback platform app has had: what its message and feedback routes serve.

Platform-neutral state shared by the Dify and RAGFlow stand-ins: conversations of end users, each a
list of answered questions with what was retrieved and every rating the user gave (a like turned
into a dislike a day later is two entries; withdrawing a rating is an entry without one). Seeded
from a :class:`~ragtrack.testing.traffic.TrafficPlan`, grown by the stand-ins' chat routes, and seen
``as_of`` a moment: a stand-in whose clock is set to day 2 serves only what had happened by then,
so a test (or the walkthrough) can pull day by day and watch ratings change.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ragtrack.production.messages import utc_iso
from ragtrack.testing.knowledge import stable_id


@dataclass(frozen=True)
class Retrieved:
    """One segment an answer was given from, as the platform knows it."""

    id: str
    document_id: str
    document_name: str
    text: str
    score: float


@dataclass
class Turn:
    """One answered question, with the ratings its user gave it, in time order."""

    id: str
    question: str
    answer: str
    retrieved: list[Retrieved]
    created_at: str  # ISO 8601, UTC
    ratings: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (at, rating, comment)

    def rating(self, as_of: str | None) -> tuple[str | None, str | None, str | None, str | None]:
        """(rating, comment, first rated at, last changed at) as the user had left it at ``as_of``."""
        shown = [r for r in self.ratings if as_of is None or r[0] <= as_of]
        if not shown or shown[-1][1] is None:
            return None, None, None, None
        start = max((n for n, r in enumerate(shown) if r[1] is None), default=-1) + 1  # after a withdrawal
        return shown[-1][1], shown[-1][2], shown[start][0], shown[-1][0]


@dataclass
class Conversation:
    id: str
    app: str  # the app (version) that served it
    user: str  # the end user as the app named them
    channel: str  # "api" (the app called the platform's API) | "webapp" (the platform's own chat page)
    created_at: str
    turns: list[Turn] = field(default_factory=list)
    deleted: bool = False


class ConversationLog:
    """Every conversation of a stand-in's apps, seen as of ``as_of`` (None: now, everything)."""

    def __init__(self, conversations: list[Conversation] | None = None):
        self.conversations: dict[str, Conversation] = {c.id: c for c in conversations or []}
        self._as_of: str | None = None
        self.lock = threading.Lock()

    @property
    def as_of(self) -> str | None:
        """The moment the conversations are seen at (None: everything): what came later has not happened."""
        return self._as_of

    @as_of.setter
    def as_of(self, moment: str | None) -> None:
        self._as_of = utc_iso(moment) if moment else None

    @classmethod
    def from_plan(cls, plan) -> ConversationLog:
        """A :class:`~ragtrack.testing.traffic.TrafficPlan` as conversations."""
        out = []
        for c in plan.conversations:
            turns = []
            for m in c.messages:
                ratings = [(at, rating, None) for at, rating in m.rating_history]
                if ratings and m.comment:
                    ratings[-1] = (*ratings[-1][:2], m.comment)
                retrieved = [
                    Retrieved(s.segment_id, s.document_id, s.document_name, s.text, s.score) for s in m.segments
                ]
                turns.append(Turn(m.message_id, m.question, m.answer, retrieved, m.created_at, ratings))
            out.append(Conversation(c.conversation_id, c.app_version, c.user, c.channel, c.created_at, turns))
        return cls(out)

    def now(self) -> str:
        return self.as_of or utc_iso(datetime.now(UTC))

    def visible(self, conversation: Conversation) -> list[Turn]:
        """The turns that had happened by ``as_of``."""
        return [t for t in conversation.turns if self.as_of is None or t.created_at <= self.as_of]

    def of_app(self, app: str, *, deleted: bool = False) -> list[Conversation]:
        """The app's conversations that had started by ``as_of``, oldest first."""
        return sorted(
            (c for c in self.conversations.values() if c.app == app and (deleted or not c.deleted) and self.visible(c)),
            key=lambda c: (c.created_at, c.id),
        )

    def find(self, turn_id: str) -> tuple[Conversation, Turn] | None:
        for c in self.conversations.values():
            for t in self.visible(c):
                if t.id == turn_id:
                    return c, t
        return None

    def answer(self, app: str, user: str, channel: str, conversation_id: str | None, turn: Turn) -> Conversation:
        """Record a turn a chat route just answered (in a new conversation when ``conversation_id`` is None)."""
        with self.lock:
            if conversation_id is None:
                conversation_id = str(stable_id("conversation", app, user, turn.id))
                self.conversations[conversation_id] = Conversation(conversation_id, app, user, channel, turn.created_at)
            conversation = self.conversations[conversation_id]
            conversation.turns.append(turn)
            return conversation

    def rate(self, turn: Turn, rating: str | None, comment: str | None) -> None:
        with self.lock:
            turn.ratings.append((self.now(), rating, comment))


def add_traffic_options(parser: argparse.ArgumentParser) -> None:
    """``--traffic en|zh`` (a seeded plan of production traffic to serve) and ``--as-of`` (its clock)."""
    parser.add_argument(
        "--traffic",
        choices=("en", "zh"),
        help="serve a seeded plan of production traffic (ragtrack.testing.traffic): en over golden/kb, zh over "
        "examples/zh-kb; --kb defaults to its corpus",
    )
    parser.add_argument("--traffic-seed", type=int, default=0, help="the plan's seed (default 0)")
    parser.add_argument("--as-of", help="show the traffic as it stood at this ISO 8601 time (default: all of it)")


def traffic_args(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The plan ``--traffic`` names (or None) and the knowledge-base folder to serve."""
    plan = None
    if args.traffic:
        from ragtrack.testing.traffic import traffic_plan

        plan = traffic_plan(args.traffic, seed=args.traffic_seed)
    if not args.kb and plan is None:
        parser.error("--kb is required (or --traffic, whose corpus is the knowledge base)")
    return plan, args.kb or plan.corpus
