"""Yesterday's traffic in numbers: rates per app version and day, their intervals, and drops that alarm.

Pure: messages and judge scores in, windows and alarms out. The monitor
command (:func:`ragtrack.api.monitor`) fetches the messages, judges a sample,
writes the assessments and runs; an engine that scores a day of traffic
elsewhere (Spark) feeds :func:`windows` the same way.

A **window** is one app version on one day (UTC). Its rates:

* ``dislike_rate``, ``like_rate`` — over every message of the window (not
  over the rated ones: most users rate nothing); Wilson intervals;
* ``no_retrieval_rate``, ``refusal_rate`` — the same way;
* ``groundedness``, ``relevance`` — means of the sampled messages' judge
  scores on the 0–1 scale (``(score − 1) / 4``), with bootstrap intervals.

A workflow app's windows (messages with node stages: ``logs pull --from mlflow`` of Dify's workflow
traces) have node figures too, read from the stages as an eval reads them
(:mod:`ragtrack.evaluation.nodes`):

* ``node/intent/<class>`` — the share of the window's runs whose intent node chose each class, and
  ``node/intent_shift`` — how far that distribution moved from the previous window's and from the
  version's first window's (total variation distance: half the summed absolute share differences,
  0 the same, 1 disjoint);
* ``node/retrieval/<title>/empty_rate`` — per retrieval node, the share of the runs it ran in where it
  found nothing;
* ``node/generation_groundedness`` — the groundedness mean (0–1) of the sampled runs whose generation
  node answered.

A **drop** is a window worse than the same version's previous window (the
latest earlier day with traffic) by more than its metric's threshold: rates
of bad things rising, judge means falling. Windows with fewer than
``min_messages`` messages on either side are never compared, and a judge mean
only when both days had that many messages judged: three messages are not a
trend.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from ragtrack.evaluation.nodes import has_generation, metric_name, predicted_intent, ran_retrievals
from ragtrack.evaluation.stats import mean_interval, proportion_interval
from ragtrack.production.messages import ProductionMessage
from ragtrack.production.signals import REFERENCE_FREE
from ragtrack.text import is_refusal

#: metric → (the worse direction: +1 rising is worse, −1 falling is worse).
METRICS: dict[str, int] = {
    "dislike_rate": +1,
    "no_retrieval_rate": +1,
    "refusal_rate": +1,
    "like_rate": -1,
    "groundedness": -1,
    "relevance": -1,
    "intent_shift": +1,  # no default threshold: an alarm only when [monitor] max_drop sets one
}
INTENT_SHIFT = "intent_shift"
MIN_MESSAGES = 20  # the default of ``[monitor] min_messages`` (ragtrack.config), where the thresholds live


@dataclass(frozen=True)
class Estimate:
    """A rate or a mean with its 95 % interval, over ``n`` messages."""

    value: float
    low: float
    high: float
    n: int


@dataclass
class Window:
    """One app version on one day: counts, the sampled judge scores, and what identifies its content."""

    app: str
    day: str  # YYYY-MM-DD, UTC
    messages: int = 0
    likes: int = 0
    dislikes: int = 0
    no_retrieval: int = 0
    refused: int = 0
    scores: dict[str, list[int]] = field(default_factory=dict)  # judge → 1–5 scores of the sampled messages
    coverage: set[str] = field(default_factory=set)  # what part of the traffic the pulls could see
    digest: str = ""  # of the message IDs and ratings: a window whose digest changed is scored again
    intents: Counter[str] = field(default_factory=Counter)  # class the intent node chose → runs
    retrievals: dict[str, list[int]] = field(default_factory=dict)  # retrieval node → [runs, empty]
    generation: list[int] = field(default_factory=list)  # groundedness 1–5 of sampled runs with a generation node

    @property
    def rates(self) -> dict[str, Estimate]:
        out = {}
        for name, count in (
            ("dislike_rate", self.dislikes),
            ("like_rate", self.likes),
            ("no_retrieval_rate", self.no_retrieval),
            ("refusal_rate", self.refused),
        ):
            if self.messages:
                low, high = proportion_interval(count, self.messages)
                out[name] = Estimate(count / self.messages, low, high, self.messages)
        for judge in REFERENCE_FREE:
            values = [(s - 1) / 4 for s in self.scores.get(judge, [])]
            if values:
                low, high = mean_interval(values)
                out[judge] = Estimate(sum(values) / len(values), low, high, len(values))
        return out

    @property
    def partial(self) -> bool:
        """Only the conversations of users who rated were visible (Dify's service API): its rates are
        not the app's."""
        return self.coverage != {"all"}

    def metrics(self) -> dict[str, float]:
        """What an MLflow run of the window logs: counts, each rate and its interval bounds."""
        out: dict[str, float] = {
            "messages": self.messages,
            "likes": self.likes,
            "dislikes": self.dislikes,
            "no_retrieval": self.no_retrieval,
            "refused": self.refused,
            **{f"judged_{j}": len(self.scores.get(j, [])) for j in REFERENCE_FREE},
        }
        for name, e in self.rates.items():
            out.update({name: e.value, f"{name}_low": e.low, f"{name}_high": e.high})
        return out | self.node_metrics()

    def node_metrics(self) -> dict[str, float]:
        """The node figures (see the module; none for an app without workflow nodes)."""
        out: dict[str, float] = {}
        if total := sum(self.intents.values()):
            out["node/intent/runs"] = total
            out |= {f"node/intent/{metric_name(c)}": n / total for c, n in sorted(self.intents.items())}
        for title, (runs, empty) in sorted(self.retrievals.items()):
            name = f"node/retrieval/{metric_name(title)}"
            out |= {f"{name}/runs": runs, f"{name}/empty_rate": empty / runs}
        if self.generation:
            out["node/generation_groundedness"] = self.generation_groundedness
            out["node/generation_judged"] = len(self.generation)
        return out

    @property
    def generation_groundedness(self) -> float:
        """The 0–1 mean groundedness of the judged runs whose generation node answered."""
        return sum((s - 1) / 4 for s in self.generation) / len(self.generation)


def day_of(message: ProductionMessage) -> str:
    return message.created_at[:10]


def windows(messages: list[ProductionMessage], scores: dict[str, dict[str, int]]) -> list[Window]:
    """Messages grouped by (app, day) with their counts; ``scores`` are message ID → judge → 1–5 of the
    messages that were judged. Ordered by app, then day."""
    grouped: dict[tuple[str, str], Window] = {}
    ids: dict[tuple[str, str], list[str]] = {}
    for m in messages:
        key = (m.app, day_of(m))
        w = grouped.setdefault(key, Window(*key))
        w.messages += 1
        w.likes += m.rating == "like"
        w.dislikes += m.rating == "dislike"
        w.no_retrieval += not m.contexts
        w.refused += is_refusal(m.answer)
        w.coverage.add(m.coverage)
        for judge, score in scores.get(m.message_id, {}).items():
            w.scores.setdefault(judge, []).append(score)
        add_nodes(w, m, scores.get(m.message_id, {}))
        ids.setdefault(key, []).append(f"{m.source}\0{m.message_id}\0{m.rating or ''}")
    for key, w in grouped.items():
        w.digest = hashlib.sha256("\n".join(sorted(ids[key])).encode()).hexdigest()[:16]
    return [grouped[k] for k in sorted(grouped)]


def add_nodes(w: Window, m: ProductionMessage, scores: dict[str, int]) -> None:
    """A message's nodes into its window's node figures: the class chosen, each retrieval node that ran
    and whether it found nothing, the groundedness of a run whose generation node answered."""
    if (chosen := predicted_intent(m)) is not None:
        w.intents[chosen] += 1
    for s in ran_retrievals(m):
        counts = w.retrievals.setdefault(s.name, [0, 0])
        counts[0] += 1
        counts[1] += not s.contexts
    if has_generation(m) and "groundedness" in scores:
        w.generation.append(scores["groundedness"])


def intent_shift(now: Counter[str], before: Counter[str]) -> float | None:
    """Total variation distance between two windows' intent distributions (None: either has none)."""
    a, b = sum(now.values()), sum(before.values())
    if not a or not b:
        return None
    return sum(abs(now[c] / a - before[c] / b) for c in set(now) | set(before)) / 2


@dataclass(frozen=True)
class Drop:
    """A metric of one window worse than the version's previous window by more than its threshold."""

    app: str
    day: str
    previous_day: str
    metric: str
    previous: float
    current: float
    threshold: float

    @property
    def change(self) -> float:
        return self.current - self.previous

    def __str__(self) -> str:
        return (
            f"{self.app} {self.day}: {self.metric} {self.previous:.3f} -> {self.current:.3f} "
            f"({self.change:+.3f}; alarm beyond {self.threshold:g}) against {self.previous_day}"
        )


@dataclass(frozen=True)
class Comparison:
    """One window against its version's previous window: the drops, or why it was not compared."""

    app: str
    day: str
    previous_day: str | None
    drops: tuple[Drop, ...] = ()
    skipped: str = ""  # why not compared ("" when it was)
    intent_shift: float | None = None  # from the previous window's intent distribution (None: no intents)
    first_day: str | None = None  # the version's first window, when it is not this one
    intent_shift_first: float | None = None  # from the first window's

    def metrics(self) -> dict[str, float]:
        """What the window's run logs of the comparison: the intent shifts."""
        out = {}
        if self.intent_shift is not None:
            out["node/intent_shift"] = self.intent_shift
        if self.intent_shift_first is not None:
            out["node/intent_shift_first"] = self.intent_shift_first
        return out


def compare_windows(
    current: Window,
    previous: Window | None,
    max_drop: dict[str, float],
    min_messages: int = MIN_MESSAGES,
    first: Window | None = None,
) -> Comparison:
    """Drops of ``current`` against ``previous`` (the same app's latest earlier window); the intent
    shifts from it and from ``first`` (the app's first window) whatever the counts."""
    shifts = {}
    if first is not None and first is not current:
        shifts = {"first_day": first.day, "intent_shift_first": intent_shift(current.intents, first.intents)}
    if previous is None:
        return Comparison(current.app, current.day, None, skipped="no earlier window to compare with", **shifts)
    shifts["intent_shift"] = shift = intent_shift(current.intents, previous.intents)
    if min(current.messages, previous.messages) < min_messages:
        return Comparison(
            current.app,
            current.day,
            previous.day,
            skipped=f"fewer than {min_messages} messages ({previous.messages} -> {current.messages})",
            **shifts,
        )
    now, before = current.rates, previous.rates
    drops = []
    classified = min(sum(current.intents.values()), sum(previous.intents.values()))
    limit = max_drop.get(INTENT_SHIFT)
    # the distance itself is the change (shown as 0 → distance), over enough classified runs on both days
    if limit is not None and shift is not None and classified >= min_messages and shift > limit + 1e-12:
        drops.append(Drop(current.app, current.day, previous.day, INTENT_SHIFT, 0.0, shift, limit))
    for metric, threshold in max_drop.items():
        # a judge mean is over the judged sample: compared only when both samples are as large
        if metric not in now or metric not in before or min(now[metric].n, before[metric].n) < min_messages:
            continue
        worse = (now[metric].value - before[metric].value) * METRICS[metric]
        if worse > threshold + 1e-12:
            drops.append(
                Drop(current.app, current.day, previous.day, metric, before[metric].value, now[metric].value, threshold)
            )
    return Comparison(current.app, current.day, previous.day, tuple(drops), **shifts)


def compare_all(
    all_windows: list[Window], max_drop: dict[str, float], min_messages: int = MIN_MESSAGES
) -> list[Comparison]:
    """Every window against the same app's previous one (windows of one app in day order), and its
    intents against the app's first window's."""
    out, last, first = [], {}, {}
    for w in sorted(all_windows, key=lambda w: (w.app, w.day)):
        first.setdefault(w.app, w)
        out.append(compare_windows(w, last.get(w.app), max_drop, min_messages, first[w.app]))
        last[w.app] = w
    return out


def node_summary(window: Window, comparison: Comparison) -> list[str]:
    """A workflow window's node figures in words (none for an app without nodes)."""
    lines = []
    if total := sum(window.intents.values()):
        shares = ", ".join(f"{c} {n}/{total}" for c, n in sorted(window.intents.items()))
        before = comparison.intent_shift
        shifts = [f"{before:.3f} from {comparison.previous_day}"] if before is not None else []
        first = comparison.intent_shift_first
        if first is not None and comparison.first_day != comparison.previous_day:
            shifts.append(f"{first:.3f} from the first day, {comparison.first_day}")
        lines.append(f"intents: {shares}" + (f" (shift {', '.join(shifts)})" if shifts else ""))
    for title, (runs, empty) in sorted(window.retrievals.items()):
        lines.append(f"retrieval node {title}: empty {empty}/{runs} ({empty / runs:.3f})")
    if window.generation:
        lines.append(
            f"generation groundedness {window.generation_groundedness:.3f} (n={len(window.generation)} judged)"
        )
    return lines


def estimate_tokens(text: str) -> int:
    """A rough token count for cost estimates: about four bytes of UTF-8 per token (so one per 1.3
    Chinese characters, one per four English letters)."""
    return max(1, len(text.encode("utf-8")) // 4)


@dataclass(frozen=True)
class Cost:
    """What judging will cost, worked out before the first call."""

    messages: int
    calls: int
    tokens_in: int  # estimated
    tokens_out: int  # at most (the judges' max_tokens per call)
    usd: float | None  # None: no price known for the judge's model
    offline: bool = False  # the heuristics: no model is called

    def __str__(self) -> str:
        if self.offline:
            return f"{self.calls} heuristic verdict(s) on {self.messages} message(s) (offline: no model calls, free)"
        money = "" if self.usd is None else f", about ${self.usd:.4f}"
        return (
            f"{self.calls} judge call(s) on {self.messages} message(s): about {self.tokens_in:,} input tokens "
            f"and at most {self.tokens_out:,} output tokens{money}"
        )
