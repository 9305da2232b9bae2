"""A seeded plan of production traffic with known bad cases: what the platform stand-ins serve.

    plan = traffic_plan("en")            # 300 conversations over golden/kb, in English
    plan = traffic_plan("zh", seed=1)    # over examples/zh-kb, in Chinese

The production loop (pull → triage → propose → monitor) can only be tested
against traffic whose truth is known. A plan is that truth, as plain data: the
Dify and RAGFlow stand-ins serve it through their message and feedback routes,
:meth:`TrafficPlan.write_jsonl` writes it as a JSONL export, and the tests
check what ragtrack found against :attr:`TrafficPlan.problems`. The same
``(kb, conversations, seed)`` gives the same plan, byte for byte, on every
machine (IDs are UUIDv5 of names, times are fixed dates).

What a plan holds (:mod:`ragtrack.testing.traffic_scripts` has the words):

* **Problems** — exactly six questions the app answers badly, each asked in
  paraphrased near-duplicate forms by four or five distinct users (some ask
  twice: again in the same conversation, or days later) and disliked by every
  one of them, with a comment; exactly one is already asked by a shipped golden
  item (:attr:`PlannedProblem.covered_by`). Each knows its ground-truth passage
  IDs and its golden type.
* **Good traffic** — questions answered from the right passages, some liked,
  most unrated; popular questions recur word for word (duplicates).
* **Noise** — a few lone dislikes of good answers (one user each), a few
  out-of-scope questions the app retrieved nothing for and refused, and some
  answers retrieved with very low scores.
* Two app versions over five days (``<app>-v1`` on days 1–3, ``<app>-v2`` on
  days 3–5, split on day 3), 60 end users, about 5 % of conversations from the
  platform's web app (``channel = "webapp"``: a Dify service API cannot list
  those users' conversations), two ratings changed from like to dislike a day
  later.

Shapes (all frozen dataclasses; :meth:`TrafficPlan.to_json` gives the dict form):

``TrafficPlan``
    ``name`` (``en``/``zh``), ``language``, ``corpus`` and ``golden`` (paths,
    absolute), ``app``, ``app_versions``, ``days`` (ISO dates), ``seed``,
    ``users`` (the platform's end-user strings, unhashed), ``conversations``,
    ``problems``.
``PlannedConversation``
    ``conversation_id`` (UUID), ``user``, ``app_version``, ``channel``
    (``api``/``webapp``), ``created_at``, ``messages`` (in time order).
``PlannedMessage``
    ``message_id`` (UUID), ``conversation_id``, ``user``, ``app_version``,
    ``channel``, ``question``, ``answer``, ``segments`` (what the app retrieved,
    best first; empty when it retrieved nothing), ``created_at`` (ISO 8601
    UTC, ``Z``), ``rating`` (``like``/``dislike``/None, the latest),
    ``comment``, ``rated_at``, ``rating_history`` (every ``(at, rating)`` in
    order, the last one current), ``problem`` (the problem key, or None),
    ``refused``.
``PlannedSegment``
    ``segment_id`` (a platform-style UUID), ``document_id``, ``document_name``
    (the corpus document, e.g. ``models/lora-basics.md``), ``text`` (the
    canonical passage's text, verbatim, so text mapping finds it), ``score``
    (0–1), and ``passage_id`` — the plan's knowledge, not a platform field.
``PlannedProblem``
    ``key``, ``type``, ``gt_passage_ids``, ``covered_by``, ``questions`` (the
    paraphrases), ``retrieved`` (the passages the app used instead),
    ``message_ids``, ``users`` (distinct askers), ``dislikes``.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from ragtrack.corpus import Corpus, load_corpus
from ragtrack.files import atomic_write_text
from ragtrack.production.messages import ProductionMessage, hash_user
from ragtrack.records import ContextRecord
from ragtrack.testing.knowledge import stable_id
from ragtrack.testing.traffic_scripts import SCRIPTS, ProblemScript, Script, TopicScript
from ragtrack.text import join_sentences

ROOT = Path(__file__).resolve().parents[2]  # the repository: the scripts name its shipped corpora
START = date(2025, 6, 2)
DAYS = 5
USERS = 60
WEBAPP_SHARE = 0.05


@dataclass(frozen=True)
class PlannedSegment:
    segment_id: str
    document_id: str
    document_name: str
    text: str
    score: float
    passage_id: str


@dataclass(frozen=True)
class PlannedMessage:
    message_id: str
    conversation_id: str
    user: str
    app_version: str
    channel: str
    question: str
    answer: str
    segments: tuple[PlannedSegment, ...]
    created_at: str
    rating: str | None = None
    comment: str | None = None
    rated_at: str | None = None
    rating_history: tuple[tuple[str, str], ...] = ()
    problem: str | None = None
    refused: bool = False

    @property
    def day(self) -> str:
        return self.created_at[:10]


@dataclass(frozen=True)
class PlannedConversation:
    conversation_id: str
    user: str
    app_version: str
    channel: str
    created_at: str
    messages: tuple[PlannedMessage, ...]


@dataclass(frozen=True)
class PlannedProblem:
    key: str
    type: str
    gt_passage_ids: tuple[str, ...]
    covered_by: str | None
    questions: tuple[str, ...]
    retrieved: tuple[str, ...]
    message_ids: tuple[str, ...]
    users: int
    dislikes: int


@dataclass(frozen=True)
class TrafficPlan:
    name: str
    language: str
    corpus: str
    golden: str
    app: str
    app_versions: tuple[str, ...]
    days: tuple[str, ...]
    seed: int
    users: tuple[str, ...]
    conversations: tuple[PlannedConversation, ...]
    problems: tuple[PlannedProblem, ...]

    def messages(self, channels: tuple[str, ...] = ("api", "webapp")) -> list[PlannedMessage]:
        """Every message in time order (of the given channels)."""
        out = [m for c in self.conversations if c.channel in channels for m in c.messages]
        return sorted(out, key=lambda m: (m.created_at, m.message_id))

    def problem(self, key: str) -> PlannedProblem:
        return next(p for p in self.problems if p.key == key)

    def daily_counts(self, channels: tuple[str, ...] = ("api", "webapp")) -> dict[tuple[str, str], dict[str, int]]:
        """``(app_version, day)`` → counts of messages, likes, dislikes, messages without retrieval and
        refusals: the exact figures a monitor run per version and day must report."""
        counts: dict[tuple[str, str], dict[str, int]] = {}
        for m in self.messages(channels):
            c = counts.setdefault(
                (m.app_version, m.day), {"messages": 0, "likes": 0, "dislikes": 0, "no_retrieval": 0, "refused": 0}
            )
            c["messages"] += 1
            c["likes"] += m.rating == "like"
            c["dislikes"] += m.rating == "dislike"
            c["no_retrieval"] += not m.segments
            c["refused"] += m.refused
        return dict(sorted(counts.items()))

    def to_json(self) -> dict:
        return asdict(self)

    def jsonl_records(self, channels: tuple[str, ...] = ("api", "webapp")) -> list[dict]:
        """The messages in ``logs pull --from jsonl``'s export shape (one record per answered question)."""
        return [
            {
                "message_id": m.message_id,
                "question": m.question,
                "answer": m.answer,
                "contexts": [{"text": s.text, "id": s.segment_id} for s in m.segments],
                "rating": m.rating,
                "comment": m.comment,
                "user": m.user,
                "created_at": m.created_at,
                "app_version": m.app_version,
            }
            for m in self.messages(channels)
        ]

    def production_messages(
        self, salt: str, source: str = "jsonl", channels: tuple[str, ...] = ("api", "webapp")
    ) -> list[ProductionMessage]:
        """What a faithful pull of this plan yields: the oracle the loop's own tests start from (the real
        pulls are checked against it)."""
        return [
            ProductionMessage(
                message_id=m.message_id,
                source=source,
                app=m.app_version,
                question=m.question,
                answer=m.answer,
                created_at=m.created_at,
                contexts=[
                    ContextRecord(s.segment_id, s.text, [s.passage_id], s.score, "text 1.00") for s in m.segments
                ],
                conversation_id=m.conversation_id,
                user=hash_user(m.user, salt),
                rating=m.rating,
                comment=m.comment,
                rated_at=m.rated_at,
            )
            for m in self.messages(channels)
        ]

    def write_jsonl(self, path: str | Path, channels: tuple[str, ...] = ("api", "webapp")) -> Path:
        lines = (json.dumps(r, ensure_ascii=False) for r in self.jsonl_records(channels))
        atomic_write_text(Path(path), "".join(line + "\n" for line in lines))
        return Path(path)


def traffic_plan(name: str = "en", *, conversations: int = 300, seed: int = 0) -> TrafficPlan:
    """The plan for one shipped knowledge base (``en``: golden/kb, ``zh``: examples/zh-kb)."""
    if name not in SCRIPTS:
        raise ValueError(f"unknown traffic plan {name!r}: one of {sorted(SCRIPTS)}")
    return _Builder(name, SCRIPTS[name], conversations, seed).build()


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Builder:
    """Draws one plan: problems first (so their counts are fixed), then good traffic up to the size."""

    def __init__(self, name: str, script: Script, conversations: int, seed: int):
        self.name, self.script, self.size = name, script, conversations
        self.rng = random.Random(f"{name}:{seed}")
        self.seed = seed
        self.corpus: Corpus = load_corpus(ROOT / script.corpus)
        self.language = self.corpus.language
        self.days = [START + timedelta(days=d) for d in range(DAYS)]
        self.versions = (f"{script.app}-v1", f"{script.app}-v2")
        self.users = tuple(f"{name}-user-{n:03d}" for n in range(1, USERS + 1))
        self.conversations: list[dict] = []  # mutable while drawing; frozen at the end
        self.serial = 0
        self.others = sorted(self.corpus.passages)

    # ------------------------------------------------------------------ ids and shapes
    def _id(self, *parts: str) -> str:
        return str(stable_id("traffic", self.name, str(self.seed), *parts))

    def _segment(self, passage_id: str, score: float) -> PlannedSegment:
        passage = self.corpus.passages[passage_id]
        return PlannedSegment(
            segment_id=self._id("segment", passage_id),
            document_id=self._id("document", passage.doc_id),
            document_name=passage.doc_id,
            text=passage.text,
            score=round(score, 4),
            passage_id=passage_id,
        )

    def _retrieval(self, passages: tuple[str, ...], low: bool = False) -> tuple[PlannedSegment, ...]:
        """The passages the app used, then two unrelated ones, scores falling (all low when ``low``)."""
        if not passages:
            return ()
        noise = [p for p in self.rng.sample(self.others, 4) if p not in passages][:2]
        top = self.rng.uniform(0.12, 0.22) if low else self.rng.uniform(0.72, 0.93)
        scores = [top * (0.92**n) for n in range(len(passages))]
        scores += sorted((top * self.rng.uniform(0.4, 0.6) for _ in noise), reverse=True)
        return tuple(self._segment(p, s) for p, s in zip([*passages, *noise], scores, strict=True))

    def _answer(self, topic: TopicScript) -> str:
        statements = self.corpus.passages[topic.passages[0]].statements()
        return join_sentences(statements[:2], self.language)

    # ------------------------------------------------------------------ time and versions
    def _start(self, day: int) -> datetime:
        minutes = self.rng.randrange(8 * 60, 22 * 60)
        return datetime(*self.days[day].timetuple()[:3], tzinfo=UTC) + timedelta(minutes=minutes)

    def _version(self, day: int) -> str:
        if day < 2:
            return self.versions[0]
        if day > 2:
            return self.versions[1]
        return self.rng.choice(self.versions)

    def _conversation(self, user: str, day: int, channel: str = "api") -> dict:
        conv = {
            "conversation_id": self._id("conversation", str(len(self.conversations))),
            "user": user,
            "app_version": self._version(day),
            "channel": channel,
            "start": self._start(day),
            "messages": [],
        }
        self.conversations.append(conv)
        return conv

    def _add(self, conv: dict, question: str, answer: str, segments, *, rating=None, comment=None, **extra) -> dict:
        last = conv["messages"][-1]["at"] if conv["messages"] else conv["start"]
        at = last + timedelta(minutes=self.rng.randrange(2, 7)) if conv["messages"] else last
        history = ()
        if rating:
            history = ((_iso(at + timedelta(minutes=self.rng.randrange(1, 30))), rating),)
        message = {
            "message_id": self._id("message", str(self.serial)),
            "user": conv["user"],
            "question": question,
            "answer": answer,
            "segments": tuple(segments),
            "at": at,
            "rating": rating,
            "comment": comment,
            "rating_history": history,
            **extra,
        }
        self.serial += 1
        conv["messages"].append(message)
        return message

    # ------------------------------------------------------------------ drawing
    def build(self) -> TrafficPlan:
        problems = [self._problem(p) for p in self.script.problems]
        self._changed_minds(problems)
        for question in self.script.out_of_scope:
            for _ in range(self.rng.choice((1, 2))):
                conv = self._conversation(self.rng.choice(self.users), self.rng.randrange(DAYS))
                self._add(conv, question, self.script.refusal, (), refused=True)
        self._good_traffic()
        return self._frozen(problems)

    def _problem(self, script: ProblemScript) -> tuple[ProblemScript, list[dict]]:
        askers = self.rng.sample(self.users, self.rng.choice((4, 5)))
        asks = [(u, True) for u in askers] + [(u, False) for u in self.rng.sample(askers, self.rng.choice((1, 2)))]
        messages, first = [], {}
        for n, (user, disliked) in enumerate(asks):
            question = script.questions[n % len(script.questions)]
            if not disliked and self.rng.random() < 0.5:
                conv = first[user]  # asked again in the same conversation, a few minutes later
            else:
                conv = self._conversation(user, self.rng.randrange(DAYS))
                first.setdefault(user, conv)
            rating = "dislike" if disliked or self.rng.random() < 0.5 else None
            comment = self.rng.choice(script.comments) if rating and self.rng.random() < 0.8 else None
            segments = self._retrieval(script.retrieved)
            refused = not script.retrieved
            messages.append(
                self._add(
                    conv,
                    question,
                    script.answer,
                    segments,
                    rating=rating,
                    comment=comment,
                    problem=script.key,
                    refused=refused,
                )
            )
        return script, messages

    def _changed_minds(self, problems) -> None:
        """Two users liked a bad answer at first and changed it to a dislike a day later."""
        for _, messages in problems[:2]:
            m = messages[0]
            liked_at = m["at"] + timedelta(minutes=1)
            m["rating_history"] = ((_iso(liked_at), "like"), (_iso(liked_at + timedelta(days=1)), "dislike"))

    def _good_traffic(self) -> None:
        topics = self.script.topics
        weights = [1 / (n + 1) ** 0.6 for n in range(len(topics))]  # a few popular questions recur verbatim
        strays = 0
        while len(self.conversations) < self.size:
            channel = "webapp" if self.rng.random() < WEBAPP_SHARE else "api"
            conv = self._conversation(self.rng.choice(self.users), self.rng.randrange(DAYS), channel)
            for _ in range(self.rng.choices((1, 2, 3), (70, 22, 8))[0]):
                topic = self.rng.choices(topics, weights)[0]
                question = self.rng.choice(topic.questions)
                low = self.rng.random() < 0.05
                rating = comment = None
                roll = self.rng.random()
                if roll < 0.3:
                    rating = "like"
                    comment = self.rng.choice(self.script.like_comments) if self.rng.random() < 0.3 else None
                elif roll < 0.31 and strays < len(self.script.stray_comments) and channel == "api":
                    rating, comment = "dislike", self.script.stray_comments[strays]
                    strays += 1
                self._add(
                    conv,
                    question,
                    self._answer(topic),
                    self._retrieval(topic.passages, low),
                    rating=rating,
                    comment=comment,
                )
                if self.rng.random() < 0.05:  # the user asks the same thing again, word for word
                    self._add(conv, question, self._answer(topic), self._retrieval(topic.passages))

    def _frozen(self, problems) -> TrafficPlan:
        conversations = []
        for conv in sorted(self.conversations, key=lambda c: (c["start"], c["conversation_id"])):
            messages = tuple(
                PlannedMessage(
                    message_id=m["message_id"],
                    conversation_id=conv["conversation_id"],
                    user=conv["user"],
                    app_version=conv["app_version"],
                    channel=conv["channel"],
                    question=m["question"],
                    answer=m["answer"],
                    segments=m["segments"],
                    created_at=_iso(m["at"]),
                    rating=m["rating_history"][-1][1] if m["rating_history"] else None,
                    comment=m["comment"],
                    rated_at=m["rating_history"][-1][0] if m["rating_history"] else None,
                    rating_history=m["rating_history"],
                    problem=m.get("problem"),
                    refused=m.get("refused", False),
                )
                for m in conv["messages"]
            )
            conversations.append(
                PlannedConversation(
                    conv["conversation_id"],
                    conv["user"],
                    conv["app_version"],
                    conv["channel"],
                    _iso(conv["start"]),
                    messages,
                )
            )
        planned = []
        for script, messages in problems:
            planned.append(
                PlannedProblem(
                    key=script.key,
                    type=script.type,
                    gt_passage_ids=script.gt,
                    covered_by=script.covered_by,
                    questions=script.questions,
                    retrieved=script.retrieved,
                    message_ids=tuple(m["message_id"] for m in messages),
                    users=len({m["user"] for m in messages}),
                    dislikes=sum(m["rating_history"][-1][1] == "dislike" for m in messages if m["rating_history"]),
                )
            )
        return TrafficPlan(
            name=self.name,
            language=self.language,
            corpus=str(ROOT / self.script.corpus),
            golden=str(ROOT / self.script.golden),
            app=self.script.app,
            app_versions=self.versions,
            days=tuple(d.isoformat() for d in self.days),
            seed=self.seed,
            users=self.users,
            conversations=tuple(conversations),
            problems=tuple(planned),
        )
