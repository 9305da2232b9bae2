"""The promotion rule, as a pure function of two runs' figures and their paired comparison.

A challenger becomes champion only when, on the same golden set and judge:

* its mean correctness beats the champion's by more than ``margin`` (default 0), and
* its mean groundedness is not below the champion's minus ``tolerance`` (default 0);
* optionally, the correctness gain is significant: its 95% paired-bootstrap interval excludes 0
  and the sign-flip p < 0.05 (the two can disagree at the edge; both must hold);
* optionally (``[promotion] require_interval``), the intervals clear the rule itself: the lower
  bound of the correctness Δ interval is above ``margin`` and the lower bound of the groundedness Δ
  interval is at least ``-tolerance`` — so a challenger with no true gain is promoted in at most
  2.5 % of evals instead of about a quarter (checked by ``benchmarks/stats_simulation.py``);
* optionally, absolute release gates (``[gates]`` of ``ragtrack.toml``) hold.

It refuses, with every reason, when the runs are not comparable, when judge
means cover fewer than all items or the eval was cut by ``--limit``, or when a
run used substituted models (the last ones can be allowed explicitly). With no champion yet, the first version
that passes its gates becomes it. Reading runs, locking and moving the alias
are :mod:`ragtrack.tracking.promotion`'s job; nothing here touches a store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ragtrack.errors import RagtrackError
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow, comparability_problems
from ragtrack.evaluation.power import multiplier
from ragtrack.evaluation.stats import PairedDifference
from ragtrack.records import ItemRecord, RunSummary

#: The registry alias that names the production version.
ALIAS = "champion"
CRITERION, GUARD = m.CRITERION, m.GUARD


@dataclass(frozen=True)
class Rule:
    margin: float = 0.0
    tolerance: float = 0.0
    require_significance: bool = False
    require_interval: bool = False
    cluster: str = "document"  # what the paired statistics resample (ragtrack.evaluation.clustering)
    allow_substitutes: bool = False
    allow_partial: bool = False
    gates: Mapping[str, float] = field(default_factory=dict)
    # Node guards ([promotion] guards): node metric → how much it may drop against the champion, paired.
    guards: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A negative margin is a non-inferiority rule (promote unless worse by more than it); a
        # negative tolerance would refuse equal groundedness, and NaN would make every comparison false.
        for name in ("margin", "tolerance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise RagtrackError(f"{name} must be a number, got {value!r}")
        if self.tolerance < 0:
            raise RagtrackError(f"tolerance is how much groundedness may drop: 0 or more, got {self.tolerance:g}")

    def describe(self) -> str:
        text = f"correctness > champion + {self.margin:g} and groundedness >= champion - {self.tolerance:g}"
        if self.require_significance:
            text += " and the correctness gain is significant (95% CI excludes 0, p < 0.05)"
        if self.require_interval:
            text += (
                f" and the 95% intervals clear it (correctness Δ low > {self.margin:g}, "
                f"groundedness Δ low >= -{self.tolerance:g})"
            )
        for guard, tolerance in self.guards.items():
            text += f" and {guard} >= champion - {tolerance:g}"
        return text


@dataclass(frozen=True)
class Gate:
    metric: str
    minimum: float
    value: float | None

    @property
    def passed(self) -> bool:
        return self.value is not None and self.value >= self.minimum


@dataclass(frozen=True)
class Champion:
    """The version the alias points at, and its latest eval on the challenger's golden set and judge."""

    model_version: str
    version: str
    run: RunSummary | None


@dataclass
class Decision:
    """What the promotion rule decided for ``version``'s eval ``run_id`` against the champion, and why:
    ``reasons`` in words, ``figures`` the paired numbers behind them, ``gates`` each release gate.
    ``accepted`` is a CI gate's pass (promoted, or the champion already)."""

    version: str
    run_id: str
    model_version: str
    champion: str | None
    champion_run_id: str | None
    champion_model_version: str | None
    promoted: bool
    rule: str
    reasons: list[str]
    figures: dict[str, float] = field(repr=False)
    gates: list[Gate] = field(repr=False)
    dry_run: bool = False
    decision_run_id: str = ""
    # The version asked about is the champion already: nothing to decide, nothing moves, and not a refusal.
    already_champion: bool = False
    # Beside this decision: what the command found about earlier ones (an interrupted promotion it
    # finished recording; in a dry run, one still unfinished).
    notes: list[str] = field(default_factory=list)
    # What a reader must know about a decision the rule allows: a gain below the set's detectable Δ.
    warnings: list[str] = field(default_factory=list)
    # The options that changed the spec's rule for this decision, each with what it waived
    # ("--allow-substitutes: v5's eval used substituted models (…)"); [] when the default rule decided.
    overrides: list[str] = field(default_factory=list)

    @property
    def flags(self) -> str:
        """The overriding options alone, as typed (``--allow-substitutes --margin -0.1``); "" when none."""
        return " ".join(dict.fromkeys(o.split(":", 1)[0] for o in self.overrides))

    @property
    def accepted(self) -> bool:
        """The version is (or, in a dry run, would be) the champion after this decision: a CI gate's pass."""
        return self.promoted or self.already_champion

    @property
    def outcome(self) -> str:
        return "promoted" if self.promoted else "unchanged" if self.already_champion else "refused"

    @property
    def verb(self) -> str:
        if self.already_champion:
            return "is already the champion"
        return ("would be promoted" if self.dry_run else "promoted") if self.promoted else "refused"

    def summary(self) -> str:
        if self.already_champion:
            return f"{self.version} {self.verb} (model version {self.model_version}): " + "; ".join(self.reasons)
        against = f" over {self.champion} (model version {self.champion_model_version})" if self.champion else ""
        # "v1 refused over v1" says nothing: the challenger is another model version of the champion's name
        mine = f" (model version {self.model_version})" if self.champion == self.version else ""
        waived = f" [overrides: {'; '.join(self.overrides)}]" if self.overrides else ""
        return f"{self.version}{mine} {self.verb}{against}{waived}: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Standing:
    """A run against the champion: the rule's decision and, when there is one, the paired comparison behind it."""

    decision: Decision
    champion: RunSummary | None = None  # the champion's eval the challenger was paired with
    rows: tuple[MetricRow, ...] = ()
    changes: tuple[ItemChange, ...] = ()
    champion_records: tuple[ItemRecord, ...] = ()  # that eval's items, as paired (its regressions table reads them)


def partial_means(run: RunSummary) -> list[str]:
    """The rule's judges whose mean covers fewer than all of the run's items."""
    items = run.metrics.get(m.ITEMS, 0)
    return [j for j in (CRITERION, GUARD) if run.metrics.get(m.judge_count(j), items) < items]


def _why_partial(run: RunSummary) -> str:
    unanswered = int(run.metrics.get(m.UNANSWERED, 0))
    unreported = int(run.metrics.get(m.ITEMS, 0) - run.metrics.get(m.RETRIEVAL_N, run.metrics.get(m.ITEMS, 0)))
    if unanswered:
        return f"{unanswered} question{'s' if unanswered != 1 else ''} got no answer"
    if unreported:  # groundedness reads the contexts: a reply that did not report them is not judged on it
        return f"{unreported} repl{'ies' if unreported != 1 else 'y'} did not say what was retrieved, or judge errors"
    return "judge errors"


def overrides(challenger: RunSummary, incumbent: RunSummary | None, rule: Rule) -> list[str]:
    """Each option of ``rule`` that departs from the spec's rule and applies to these runs, with what it
    waived: an ``--allow-*`` flag only when there was something to allow, a margin or tolerance not 0."""
    out = []
    if rule.allow_substitutes:
        runs = [(f"{challenger.version}'s", challenger), ("the champion's", incumbent)]
        for whose, run in runs:
            if run is not None and run.substituted:
                swaps = f" ({run.substitutions})" if run.substitutions else ""
                out.append(f"--allow-substitutes: {whose} eval used substituted models{swaps}")
    if rule.allow_partial:
        for whose, run in [(f"{challenger.version}'s", challenger), ("the champion's", incumbent)]:
            if run is None:
                continue
            if partial := partial_means(run):
                out.append(f"--allow-partial: {whose} {', '.join(partial)} mean covers fewer than all items")
            if run.limited:
                out.append(f"--allow-partial: {whose} eval answered {run.limited} golden items (--limit)")
    if rule.margin:
        out.append(f"--margin {rule.margin:g}: correctness must beat the champion by {rule.margin:g}, not 0")
    if rule.tolerance:
        out.append(f"--tolerance {rule.tolerance:g}: groundedness may drop by {rule.tolerance:g}, not 0")
    return out


def decide(
    challenger: RunSummary,
    champion: Champion | None,
    rule: Rule,
    paired: Mapping[str, PairedDifference] | None = None,
) -> Decision:
    """Apply ``rule``; ``paired`` holds the all-items paired differences champion → challenger."""
    shown = {CRITERION, GUARD, m.judge_count(CRITERION), m.judge_count(GUARD), "context_recall", m.ITEMS}
    decision = Decision(
        version=challenger.version,
        run_id=challenger.run_id,
        model_version=challenger.model_version,
        champion=champion.version if champion else None,
        champion_run_id=champion.run.run_id if champion and champion.run else None,
        champion_model_version=champion.model_version if champion else None,
        promoted=False,
        rule=rule.describe(),
        reasons=[],
        figures={f"challenger_{k}": v for k, v in challenger.metrics.items() if m.split_key(k)[0] in shown},
        gates=[Gate(name, minimum, challenger.metrics.get(name)) for name, minimum in sorted(rule.gates.items())],
    )
    refuse = decision.reasons.append
    if champion and champion.model_version == challenger.model_version:
        decision.already_champion = True
        decision.reasons.append("nothing to decide; the alias stays where it is")
        return decision
    decision.overrides = overrides(challenger, champion.run if champion else None, rule)
    if challenger.substituted and not rule.allow_substitutes:
        refuse(
            f"{challenger.version}'s eval used substituted models (see rerank_model / embedding_model params); "
            "measure the version as specified, or pass --allow-substitutes"
        )
    if (partial := partial_means(challenger)) and not rule.allow_partial:
        refuse(
            f"{challenger.version}'s {', '.join(partial)} mean covers fewer than all items "
            f"({_why_partial(challenger)}); pass --allow-partial to decide anyway"
        )
    if challenger.limited and not rule.allow_partial:
        refuse(
            f"{challenger.version}'s eval answered {challenger.limited} golden items (--limit); "
            "decide on a full eval, or pass --allow-partial"
        )
    for gate in decision.gates:
        if not gate.passed:
            value = "missing" if gate.value is None else f"{gate.value:g}"
            refuse(f"gate {gate.metric} >= {gate.minimum:g} failed ({value})")

    if champion is None:
        if not decision.reasons:
            decision.promoted = True
            decision.reasons.append("no champion yet: the first evaluated version that passes its gates becomes it")
        return decision

    incumbent = champion.run
    if incumbent is None:
        items = int(challenger.metrics.get(m.ITEMS, 0))
        # Under one name, "ragtrack eval --version X" here would evaluate this checkout's spec, not the champion's.
        spec = (
            f"a checkout of the champion's spec (model version {champion.model_version})"
            if champion.version == challenger.version
            else "the champion's spec: an edited spec is a new model version"
        )
        refuse(
            f"the champion {champion.version} (model version {champion.model_version}) has no eval on the "
            f"golden set of {challenger.version}'s run (digest {challenger.golden_digest}, {items} items) with its "
            f"judge ({challenger.judge_identity}); run: ragtrack eval --version {champion.version}, with the "
            f"--golden, --corpus, --limit and --judge that run used (and {spec})"
        )
        return decision
    for problem in comparability_problems(incumbent, challenger):
        refuse(f"not comparable: {problem}")
    if incumbent.substituted and not rule.allow_substitutes:
        refuse("the champion's eval used substituted models; pass --allow-substitutes to compare anyway")
    if (partial := partial_means(incumbent)) and not rule.allow_partial:
        refuse(
            f"the champion's {', '.join(partial)} mean covers fewer than all items ({_why_partial(incumbent)}); "
            "pass --allow-partial"
        )

    paired = paired or {}
    if CRITERION not in paired or GUARD not in paired:
        refuse("no judged items in common between the two runs")
        return decision
    c, g = paired[CRITERION], paired[GUARD]
    decision.figures.update(
        {
            "champion_correctness": c.mean_a,
            "challenger_correctness_paired": c.mean_b,
            "correctness_delta": c.delta,
            "correctness_ci_low": c.ci_low,
            "correctness_ci_high": c.ci_high,
            "correctness_p": c.p_value,
            "champion_groundedness": g.mean_a,
            "challenger_groundedness_paired": g.mean_b,
            "groundedness_delta": g.delta,
            "groundedness_ci_low": g.ci_low,
            "groundedness_ci_high": g.ci_high,
            "paired_items": float(c.n),
            "clusters": float(c.units),
            "correctness_mde": multiplier() * c.se,
        }
    )
    if not c.delta > rule.margin:
        refuse(
            f"correctness {c.mean_b:.3f} vs champion {c.mean_a:.3f} (Δ {c.delta:+.3f}) "
            f"does not beat the margin {rule.margin:g}"
        )
    if g.delta < -rule.tolerance:
        refuse(
            f"groundedness regressed: {g.mean_b:.3f} vs champion {g.mean_a:.3f} "
            f"(Δ {g.delta:+.3f}, tolerance {rule.tolerance:g})"
        )
    for guard, tolerance in rule.guards.items():  # node guards: no regression beyond their tolerance
        d = paired.get(guard)
        if d is None:
            refuse(f"guard {guard}: no item both runs scored (the golden items need the node's expectations)")
        elif d.delta < -tolerance:
            refuse(
                f"guard {guard} regressed: {d.mean_b:.3f} vs champion {d.mean_a:.3f} (Δ {d.delta:+.3f}, "
                f"tolerance {tolerance:g})"
            )
        else:
            decision.figures[f"{guard.removeprefix('node/')}_delta"] = d.delta
    if rule.require_significance and not (c.significant and c.delta > 0):
        why = (
            f"95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p {c.p_text}"
            if c.testable
            else f"{c.n} paired items cannot reach p < 0.05"
        )
        refuse(f"the correctness gain is not significant ({why})")
    if rule.require_interval:
        if not c.ci_low > rule.margin:
            refuse(
                f"the correctness interval does not clear the margin: 95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}], "
                f"lower bound not above {rule.margin:g}"
            )
        if g.ci_low < -rule.tolerance:
            refuse(
                f"the groundedness interval does not clear the tolerance: 95% CI [{g.ci_low:+.3f}, {g.ci_high:+.3f}], "
                f"lower bound below -{rule.tolerance:g}"
            )
    if not decision.reasons:
        decision.promoted = True
        decision.reasons.append(
            f"correctness {c.mean_b:.3f} vs {c.mean_a:.3f} "
            f"(Δ {c.delta:+.3f}, 95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}]), "
            f"groundedness {g.mean_b:.3f} vs {g.mean_a:.3f} (Δ {g.delta:+.3f}) on {c.n} paired items"
        )
        mde = decision.figures["correctness_mde"]
        if c.se > 0 and c.delta < mde:
            decision.warnings.append(
                f"the correctness gain Δ {c.delta:+.3f} is below the minimum detectable Δ {mde:.3f} of these "
                f"{c.n} items ({c.units} clusters, 80% power): it may be noise; a larger golden set, "
                "--judge-samples or [promotion] require_interval make the decision firmer"
            )
    return decision
