"""The metric registry: every metric name ragtrack logs, parses or prints, defined once.

A logged key is a metric name plus an optional scope: ``context_recall``
(all items) or ``context_recall/type_A`` (items of type A). Names are
identical for every version, so MLflow's compare view lines runs up.

The **primary** metrics keep bare names — the means a version is judged by,
overall and per type:

* retrieval metrics, per item from context IDs, then averaged: ``context_recall``,
  ``context_precision`` (over distinct passages), ``precision_at_k`` (the field's precision@k),
  ``mrr`` (the mean of the per-item ``reciprocal_rank``:
  one metric, two names), ``hit_rate``, ``ndcg_at_k``, and ``all_hops_at_k`` for items
  with GT groups only (a mean over those items; absent when a run has none);
* judge means (1–5), one per registered judge: ``correctness``, ``groundedness``, …

Everything else is **secondary** and sits under a prefix (MLflow's charts
group keys by their first segment):

* ``norm/<judge>``: a judge's mean normalised 0–1;
* ``counts/``: ``counts/items`` (items in the scope), ``counts/judged/<judge>``
  (items the judge scored), ``counts/judge_errors/<judge>`` (verdicts that could
  not be read), and — about what the agent returned rather than how good it was,
  never compared or gated — ``counts/retrieval_reported`` (items whose reply said
  what it retrieved: the retrieval means cover these), ``counts/agent_errors``
  (items on which the agent reported any error), ``counts/unanswered`` (items it
  gave no answer for: not judged, so a judge mean then covers fewer items);
* ``mapping/unmapped_share``: share of retrieved contexts that map to no corpus passage;
* ``citation/<figure>``, for answers that cite their contexts (:mod:`ragtrack.evaluation.citations`):
  ``validity``, ``coverage``, ``precision``, ``recall`` (given retrieval) and ``support``, each a mean
  over the items where it has a denominator;
* ``judge_sd/<judge>``, for runs judged K > 1 times per item (``--judge-samples``): the mean
  within-item SD of the K verdicts (how much the judge disagrees with itself);
* a paired comparison with another run: ``delta/<key>``, ``delta_ci_low/<key>``,
  ``delta_ci_high/<key>`` (95% interval) and ``delta_p/<key>``;
* what the LLM work cost: ``usage/<agent|judge>/<step>/<figure>``, ``usage/peak_in_flight``.

Runs logged before the prefixes (``correctness_norm``, ``correctness_n``,
``items``, ``retrieval_n``, …) read back under today's names (:func:`current_key`).

:func:`display_order` is the order a run logs them in: MLflow's run page and
tables list metrics in the order they were first logged, so the primary means
come first (:data:`HEADLINE` leading, then each one per type) and the
accounting last. Logged values are rounded for reading (:func:`for_display`).

Nothing outside this module builds or splits these names by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ragtrack.evaluation.judges import JUDGES
from ragtrack.golden import TYPES
from ragtrack.records import ItemRecord
from ragtrack.registry import Registry, UnknownNameError

ALL = "all"


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    lower: float = 0.0  # the scale: 0–1 for rates, 1–5 for judge means
    upper: float = 1.0
    higher_is_better: bool = True
    item_key: str | None = None  # retrieval: the key in an item record's ``retrieval`` dict
    judge: str | None = None  # judge metrics: which judge
    normalized: bool = False  # judge metrics: the 0–1 form
    needs_groups: bool = False  # applies only to items with GT groups (multi-hop benchmarks)
    citation: str | None = None  # citation figures: the key in an item record's ``citations`` dict
    node: str | None = None  # node metrics: the function of ragtrack.evaluation.nodes giving an item's value


RETRIEVAL: Registry[Metric] = Registry(
    "retrieval metric",
    {
        "context_recall": Metric("context_recall", "share of the GT passages retrieved", item_key="context_recall"),
        "context_precision": Metric(
            "context_precision",
            "share of the distinct retrieved passages that are GT (repeated chunks of one passage count once)",
            item_key="context_precision",
        ),
        "precision_at_k": Metric(
            "precision_at_k",
            "relevant units in the top k / k, as trec_eval and ranx define precision@k (a repeat is non-relevant)",
            item_key="precision_at_k",
        ),
        "mrr": Metric("mrr", "mean of 1 / rank of the first GT passage (0 when none)", item_key="reciprocal_rank"),
        "hit_rate": Metric("hit_rate", "share of items with at least one GT passage retrieved", item_key="hit_rate"),
        "ndcg_at_k": Metric("ndcg_at_k", "binary-relevance nDCG at the version's top_k", item_key="ndcg_at_k"),
        "all_hops_at_k": Metric(
            "all_hops_at_k",
            "share of items with GT groups that have a passage of every group (hop) in the top_k",
            item_key="all_hops_at_k",
            needs_groups=True,
        ),
    },
)
#: Node metrics compare and promote pair item by item (secondary: Holm-adjusted with the others);
#: ``[promotion] guards`` names them without the prefix. See :mod:`ragtrack.evaluation.nodes`.
NODE: Registry[Metric] = Registry(
    "node metric",
    {
        "node/intent_accuracy": Metric(
            "node/intent_accuracy", "share of items whose intent node chose the golden intent", node="intent_correct"
        ),
        "node/rewrite_retention": Metric(
            "node/rewrite_retention", "share of must_keep terms the rewrite node kept", node="retention"
        ),
        "node/rewrite_fidelity": Metric(
            "node/rewrite_fidelity",
            "rewrite-fidelity verdict (0-1) on items without must_keep terms",
            node="fidelity",
        ),
        "node/generation_groundedness": Metric(
            "node/generation_groundedness",
            "groundedness (0-1) of the generation node's answer in the contexts it received",
            node="generation_grounded",
        ),
    },
)
# Per-item names that are another name for a registered metric.
ALIASES = {"reciprocal_rank": "mrr"}

#: The prefixes of the secondary figures.
NORM, COUNTS, MAPPING = "norm", "counts", "mapping"
ITEMS = f"{COUNTS}/items"
RETRIEVAL_N = f"{COUNTS}/retrieval_reported"
UNMAPPED_SHARE = f"{MAPPING}/unmapped_share"
AGENT_ERRORS = f"{COUNTS}/agent_errors"
UNANSWERED = f"{COUNTS}/unanswered"
CONTEXT_FIGURES: Registry[Metric] = Registry(
    "context figure",
    {
        RETRIEVAL_N: Metric(
            RETRIEVAL_N,
            "items whose reply said what it retrieved; the retrieval means cover only these",
            upper=math.inf,
        ),
        UNMAPPED_SHARE: Metric(
            UNMAPPED_SHARE,
            "share of the retrieved contexts that map to no corpus passage (counted as retrieved, non-relevant)",
            higher_is_better=False,
        ),
        AGENT_ERRORS: Metric(
            AGENT_ERRORS, "items on which the agent reported an error", upper=math.inf, higher_is_better=False
        ),
        UNANSWERED: Metric(
            UNANSWERED,
            "items the agent gave no answer for (its call failed or its reply could not be read): not judged",
            upper=math.inf,
            higher_is_better=False,
        ),
    },
)
CITATION_PREFIX = "citation"
CITATION: Registry[Metric] = Registry(
    "citation figure",
    {
        f"{CITATION_PREFIX}/{figure}": Metric(f"{CITATION_PREFIX}/{figure}", description, citation=figure)
        for figure, description in (
            ("validity", "share of citation markers that name a context the answer was given"),
            ("coverage", "share of the answer's claim sentences that carry a citation"),
            ("precision", "share of the cited passages that are GT"),
            ("recall", "share of the GT passages among the contexts that the answer cites (given retrieval)"),
            ("support", "share of cited sentences their cited contexts support (IDs first, then a judge)"),
        )
    },
)

#: Above this unmapped share ``ragtrack eval`` warns: the retrieval metrics then say more about
#: the mapping (a corpus that is not what the agent indexed) than about the agent.
UNMAPPED_WARNING = 0.10


def judge_metric(judge: str, normalized: bool = False) -> Metric:
    """``correctness`` (1–5) or ``norm/correctness`` (0–1) for a registered judge."""
    JUDGES.check(judge)
    if normalized:
        return Metric(f"{NORM}/{judge}", f"{judge}, mean normalised 0-1", judge=judge, normalized=True)
    return Metric(judge, f"{judge}, mean judge score 1-5", lower=1.0, upper=5.0, judge=judge)


def judge_count(judge: str) -> str:
    """``counts/judged/correctness``: the items a judge scored."""
    return f"{COUNTS}/judged/{judge}"


def judge_errors(judge: str) -> str:
    return f"{COUNTS}/judge_errors/{judge}"


def judge_spread(judge: str) -> str:
    """``judge_sd/<judge>``: the judge's own noise, the mean over items of the SD of its K verdicts (1–5)."""
    return f"judge_sd/{judge}"


def lookup(name: str) -> Metric:
    """The metric a name stands for: a retrieval metric (or its alias) or a judge mean (1–5 or 0–1;
    ``groundedness_norm``, the name before the prefixes, still names ``norm/groundedness``)."""
    name = current_key(ALIASES.get(name, name))
    if name in RETRIEVAL:
        return RETRIEVAL.get(name)
    if name in CITATION:
        return CITATION.get(name)
    if name in NODE:
        return NODE.get(name)
    for judge in JUDGES:
        if name == judge:
            return judge_metric(judge)
        if name == judge_metric(judge, normalized=True).name:
            return judge_metric(judge, normalized=True)
    known = [
        *RETRIEVAL.names(),
        *ALIASES,
        *JUDGES.names(),
        *(judge_metric(j, True).name for j in JUDGES),
        *NODE.names(),
        *CITATION.names(),
    ]
    raise UnknownNameError(f"unknown metric {name!r}; expected one of: {', '.join(known)}")


def current_key(logged: str) -> str:
    """A key as a run logged it before the secondary figures moved under prefixes, in today's name
    (``correctness_norm/type_A`` → ``norm/correctness/type_A``, ``items`` → ``counts/items``);
    today's keys are returned as they are."""
    name, scope = split_key(logged)
    if name in _LEGACY:
        return key(_LEGACY[name], scope)
    base, sep, judge = name.rpartition("_")
    if sep and base in JUDGES and judge in ("n", "norm"):
        return key(judge_count(base) if judge == "n" else judge_metric(base, normalized=True).name, scope)
    if name.startswith("judge_errors/") and name.removeprefix("judge_errors/") in JUDGES:
        return key(judge_errors(name.removeprefix("judge_errors/")), scope)
    return logged


_LEGACY = {
    "items": ITEMS,
    "retrieval_n": RETRIEVAL_N,
    "unmapped_share": UNMAPPED_SHARE,
    "agent_errors": AGENT_ERRORS,
    "unanswered": UNANSWERED,
}


def key(name: str, scope: str = ALL) -> str:
    """The logged key of ``name`` in ``scope`` (``all`` or a question type)."""
    return name if scope == ALL else f"{name}/type_{scope}"


def split_key(logged: str) -> tuple[str, str]:
    """``context_recall/type_A`` → (``context_recall``, ``A``); ``mrr`` → (``mrr``, ``all``)."""
    name, sep, scope = logged.rpartition("/type_")
    return (name, scope) if sep and scope in TYPES else (logged, ALL)


def applies(record: ItemRecord, name: str) -> bool:
    """Whether a metric is defined for an item at all (``all_hops_at_k`` needs GT groups)."""
    return not lookup(name).needs_groups or bool(record.gt_groups)


def item_value(record: ItemRecord, name: str) -> float | None:
    """One item's value of a metric (``mrr``, ``correctness``, ``correctness_norm``); None when unscored
    or when the metric does not apply to the item."""
    metric = lookup(name)
    if not applies(record, name):
        return None
    if metric.item_key is not None:
        return record.retrieval.get(metric.item_key)
    if metric.citation is not None:
        return record.citations.get(metric.citation)
    if metric.node is not None:
        from ragtrack.evaluation import nodes  # it reads records only; imported here, where a node metric is asked

        return getattr(nodes, metric.node)(record)
    verdict = record.judges.get(metric.judge or "")
    if verdict is None or verdict.score is None:
        return None
    return verdict.normalized if metric.normalized else float(verdict.score)


def item_samples(record: ItemRecord, name: str) -> list[float]:
    """Every judge verdict behind an item's judge metric (``--judge-samples``), on the metric's scale;
    the single verdict when it was asked once. Empty when unscored."""
    metric = lookup(name)
    verdict = record.judges.get(metric.judge or "")
    if verdict is None or verdict.score is None:
        return []
    scores = verdict.samples or [verdict.score]
    return [(s - 1) / 4 if metric.normalized else float(s) for s in scores]


#: The promotion rule's criterion and guard: the pre-registered primary tests of every comparison.
CRITERION, GUARD = "correctness", "groundedness"
PRIMARY = (CRITERION, GUARD)

#: The four figures a version is summed up by: the promotion criterion and guard, recall and ranking.
CORE = ("correctness", "groundedness", "context_recall", "mrr")
#: What a reader looks at first, in this order.
HEADLINE = (*CORE, "context_precision", "relevance", "hit_rate")

#: A paired comparison's figures, each logged as ``<figure>/<key>``.
COMPARISON_FIGURES = ("delta", "delta_ci_low", "delta_ci_high", "delta_p")

USAGE = "usage"
PEAK_IN_FLIGHT = f"{USAGE}/peak_in_flight"


def comparison_key(figure: str, name: str, scope: str = ALL) -> str:
    """``delta_ci_low/correctness``: one figure of the paired comparison of ``name`` in ``scope``."""
    if figure not in COMPARISON_FIGURES:
        raise UnknownNameError(
            f"unknown comparison figure {figure!r}; expected one of: {', '.join(COMPARISON_FIGURES)}"
        )
    return f"{figure}/{key(name, scope)}"


def for_display(value: float) -> float:
    """``value`` as a run logs it, to be read: three decimals (2.5208333 → 2.521), or three significant
    digits below 0.001 (a p-value, a cost), which three decimals would turn into 0. Decisions pair the
    items' own scores, never these."""
    value = float(value)
    if not math.isfinite(value) or value == 0 or abs(value) >= 0.001:
        return round(value, 3) if math.isfinite(value) else value
    return float(f"{value:.3g}")


def usage_key(who: str, step: str, figure: str) -> str:
    """``usage/judge/judge.correctness/calls``: one accounting figure of one LLM step."""
    return f"{USAGE}/{who}/{step}/{figure}"


def display_order(keys: Iterable[str]) -> list[str]:
    """Logged keys in reading order.

    The primary means over all items (headline first), then each of them per type
    (grouped by metric), the comparison figures, the 0–1 forms, the counts, and the
    LLM accounting last.
    """
    names = [*HEADLINE, *(n for n in comparable_metrics() if n not in HEADLINE and "/" not in n)]  # bare: primary

    def position(name: str) -> int:
        base = name.rpartition("/")[2]  # norm/correctness, counts/judged/correctness → correctness
        return names.index(base) if base in names else len(names)

    def rank(logged: str) -> tuple:
        if logged.startswith(f"{USAGE}/"):
            return (6, 0, "", logged)
        figure, sep, rest = logged.partition("/")
        if sep and figure in COMPARISON_FIGURES:
            name, scope = split_key(rest)
            return (2, position(name), "" if scope == ALL else scope, str(COMPARISON_FIGURES.index(figure)))
        name, scope = split_key(logged)
        if name in names:
            return (0 if scope == ALL else 1, position(name), "" if scope == ALL else scope, name)
        group = 3 if name.startswith(f"{NORM}/") else 4 if name == ITEMS else 5
        return (group, position(name), "" if scope == ALL else scope, name)

    return sorted(keys, key=rank)


def comparable_metrics() -> tuple[str, ...]:
    """What ``compare`` pairs item by item: every retrieval metric, every judge mean, the node metrics, then
    the citation figures (secondary: paired where both versions' answers cite)."""
    return (*RETRIEVAL.names(), *JUDGES.names(), *NODE.names(), *CITATION.names())
