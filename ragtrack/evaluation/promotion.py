"""The promotion rule, as a pure function of two runs' figures and their paired comparison.

A challenger becomes champion only when, on the same golden set and judge:

* its mean correctness beats the champion's by more than ``margin`` (default 0), and
* its mean groundedness is not below the champion's minus ``tolerance`` (default 0);
* optionally, the correctness gain is significant: its 95% t interval over clusters excludes 0
  and the sign-flip p < 0.05 (the two can disagree at the edge; both must hold);
* optionally (``[promotion] require_interval``), the intervals decide, as two tests declared in
  advance (each one-sided at 2.5 %: the lower bound of a 95 % t interval): correctness
  *superiority* — the correctness Δ interval's lower bound above ``margin`` — and groundedness
  *non-inferiority* — the groundedness Δ interval's lower bound above ``-tolerance``, where the
  tolerance is a declared margin > 0 (:data:`NONINFERIORITY_TOLERANCE` on the 1–5 scale unless
  given). Asking groundedness's lower bound to clear 0 (tolerance 0) asks it to be significantly
  *better*: that gate promoted 2 % of challengers with a true correctness gain of 0.4. A metric with
  no variation ("no variation in n items — not evidence") and a design of five clusters or fewer
  (no test at 5 % possible) clear nothing. Measured by ``benchmarks/stats_simulation.py``: a null
  challenger promoted ≤ 5 %, one at twice the printed MDE ≥ 80 %;
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
from ragtrack.evaluation.power import detection_power, power_of
from ragtrack.evaluation.stats import PairedDifference
from ragtrack.records import ItemRecord, RunSummary

#: The registry alias that names the production version.
ALIAS = "champion"
CRITERION, GUARD = m.CRITERION, m.GUARD

#: The groundedness drop (1–5 scale) the interval gate's non-inferiority test tolerates unless told:
#: half a point, half the judge's smallest step. A smaller one needs a larger set to be shown at all:
#: with the shipped design's spread (SE ≈ 0.15 at 48 items) 0.25 is shown only a third of the time
#: when groundedness is truly unchanged, 0.5 about 90 % (``decision_lines`` prints this power).
NONINFERIORITY_TOLERANCE = 0.5


@dataclass(frozen=True)
class Rule:
    margin: float = 0.0
    tolerance: float | None = None  # None: 0 for the mean rule, NONINFERIORITY_TOLERANCE with the interval gate
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
            if name == "tolerance" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise RagtrackError(f"{name} must be a number, got {value!r}")
        if self.tolerance is not None and self.tolerance < 0:
            raise RagtrackError(f"tolerance is how much groundedness may drop: 0 or more, got {self.tolerance:g}")
        if self.require_interval and self.tolerance == 0:
            raise RagtrackError(
                "the interval gate tests groundedness for non-inferiority: its tolerance must be above 0 "
                f"(a lower bound above -0 asks groundedness to be significantly better); the default is "
                f"{NONINFERIORITY_TOLERANCE:g} on the 1-5 scale"
            )

    @property
    def guard_tolerance(self) -> float:
        """The groundedness drop allowed: as given, else 0 (mean rule) or the non-inferiority default."""
        if self.tolerance is not None:
            return self.tolerance
        return NONINFERIORITY_TOLERANCE if self.require_interval else 0.0

    def describe(self) -> str:
        tol = self.guard_tolerance
        text = f"correctness > champion + {self.margin:g} and groundedness >= champion - {tol:g}"
        if self.require_significance:
            text += " and the correctness gain is significant (95% CI excludes 0, p < 0.05)"
        if self.require_interval:
            text += (
                f" and the 95% intervals show it (one-sided 2.5% tests declared in advance: correctness Δ low > "
                f"{self.margin:g}, superiority; groundedness Δ low > -{tol:g}, non-inferiority)"
            )
        for guard, tolerance in self.guards.items():
            text += f" and {guard} >= champion - {tolerance:g}"
        return text


def figure_interval(figures: Mapping[str, float], name: str) -> str:
    """A decision's 95% interval of ``name``'s Δ (``[-0.141, +0.516]``), or why it has none."""
    if f"{name}_ci_low" in figures:
        return f"[{figures[f'{name}_ci_low']:+.3f}, {figures[f'{name}_ci_high']:+.3f}]"
    return f"no variation in {int(figures.get('paired_items', 0))} items — not evidence"


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
    if rule.tolerance and rule.tolerance != (NONINFERIORITY_TOLERANCE if rule.require_interval else 0):
        default = f"{NONINFERIORITY_TOLERANCE:g}" if rule.require_interval else "0"
        out.append(f"--tolerance {rule.tolerance:g}: groundedness may drop by {rule.tolerance:g}, not {default}")
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
    tol = rule.guard_tolerance
    power = power_of(CRITERION, c)
    decision.figures.update(
        {
            "champion_correctness": c.mean_a,
            "challenger_correctness_paired": c.mean_b,
            "correctness_delta": c.delta,
            "correctness_se": c.se,
            "correctness_p": c.p_value,
            "champion_groundedness": g.mean_a,
            "challenger_groundedness_paired": g.mean_b,
            "groundedness_delta": g.delta,
            "groundedness_se": g.se,
            "groundedness_tolerance": tol,
            "paired_items": float(c.n),
            "clusters": float(c.units),
            "largest_cluster": float(c.largest),
        }
    )
    for name, diff in ((CRITERION, c), (GUARD, g)):
        if diff.varies:  # no interval where there is no variation: the figures say so by leaving it out
            decision.figures |= {f"{name}_ci_low": diff.ci_low, f"{name}_ci_high": diff.ci_high}
    if power.mde is not None:
        decision.figures["correctness_mde"] = power.mde
    if g.varies and g.testable:  # the chance to show non-inferiority were groundedness truly unchanged
        decision.figures["groundedness_power"] = detection_power(tol, g.se, g.df)
    if not c.delta > rule.margin:
        refuse(
            f"correctness {c.mean_b:.3f} vs champion {c.mean_a:.3f} (Δ {c.delta:+.3f}) "
            f"does not beat the margin {rule.margin:g}"
        )
    if g.delta < -tol:
        refuse(
            f"groundedness regressed: {g.mean_b:.3f} vs champion {g.mean_a:.3f} (Δ {g.delta:+.3f}, tolerance {tol:g})"
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
        why = f"95% CI {c.interval_text()}, p {c.p_text}" if c.testable else f"{c.units} clusters cannot reach p < 0.05"
        refuse(f"the correctness gain is not significant ({why})")
    if rule.require_interval:
        if not c.testable:
            refuse(f"the interval gate cannot decide: {power.reason}")
        for name, diff in ((CRITERION, c), (GUARD, g)):
            if not diff.varies:
                refuse(f"{name}: {diff.no_variation}; the interval gate cannot clear it")
        if c.varies and c.testable and not c.ci_low > rule.margin:
            refuse(
                f"the correctness interval does not show superiority: 95% CI {c.interval_text()}, "
                f"lower bound not above {rule.margin:g}"
            )
        if g.varies and g.testable and not g.ci_low > -tol:
            refuse(
                f"the groundedness interval does not show non-inferiority: 95% CI {g.interval_text()}, "
                f"lower bound not above -{tol:g}"
            )
    if not decision.reasons:
        decision.promoted = True
        decision.reasons.append(
            f"correctness {c.mean_b:.3f} vs {c.mean_a:.3f} "
            f"(Δ {c.delta:+.3f}, 95% CI {c.interval_text()}), "
            f"groundedness {g.mean_b:.3f} vs {g.mean_a:.3f} (Δ {g.delta:+.3f}) on {c.n} paired items"
        )
        if power.mde is not None and c.delta < power.mde:
            decision.warnings.append(
                f"the correctness gain Δ {c.delta:+.3f} is below the minimum detectable Δ {power.mde:.3f} of these "
                f"{c.n} items ({c.units} clusters, 80% power): it may be noise; a larger golden set, "
                "--judge-samples or [promotion] require_interval make the decision firmer"
            )
        elif power.mde is None:
            decision.warnings.append(
                f"no minimum detectable Δ for correctness ({power.reason}): the gain may be noise; "
                "[promotion] require_interval makes the decision firmer"
            )
    return decision
