"""The promotion gate: move the registry alias ``champion`` only when the challenger wins.

Rule (on the same golden digest and the same judge identity):

* mean correctness > champion's + ``margin`` (default 0: strictly better), and
* mean groundedness ≥ champion's − ``tolerance`` (default 0: no regression);
* optionally, the 95% paired-bootstrap interval of the correctness gain excludes 0;
* optionally, absolute release gates from ``ragtrack.toml`` (e.g. recall ≥ 0.90).

It refuses, with the reason, when no eval exists, when the runs are not
comparable, when judge means cover different items, or when a run used
substituted models (each of the last two can be allowed explicitly). With no
champion yet, the first evaluated version that passes its gates becomes it.

The decision runs under an exclusive lock next to the store and reads the
champion inside it, so two concurrent promotions cannot both win against the
same (stale) champion. Every decision — pass or refusal — is logged as a
``promotion`` run with its figures, and tagged on the model versions involved.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlflow.exceptions import MlflowException

from ragtrack.errors import RagtrackError
from ragtrack.evaluation.compare import compare_records
from ragtrack.evaluation.judges import JUDGES
from ragtrack.tracking import runs
from ragtrack.tracking.compare import EvalRun, comparability_problems, latest_eval_run, load_records
from ragtrack.tracking.store import Store

ALIAS = "champion"


@dataclass(frozen=True)
class Rule:
    margin: float = 0.0
    tolerance: float = 0.0
    require_significance: bool = False
    allow_substitutes: bool = False
    allow_partial: bool = False
    gates: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        text = f"correctness > champion + {self.margin:g} and groundedness >= champion - {self.tolerance:g}"
        if self.require_significance:
            text += " and the 95% CI of the correctness gain excludes 0"
        return text


@dataclass(frozen=True)
class Gate:
    metric: str
    minimum: float
    value: float | None

    @property
    def passed(self) -> bool:
        return self.value is not None and self.value >= self.minimum


@dataclass
class Decision:
    version: str
    run_id: str
    model_version: str
    champion: str | None
    champion_run_id: str | None
    champion_model_version: str | None
    promoted: bool
    dry_run: bool
    rule: str
    reasons: list[str]
    figures: dict[str, float]
    gates: list[Gate]
    decision_run_id: str = ""

    def summary(self) -> str:
        verb = ("would be promoted" if self.dry_run else "promoted") if self.promoted else "refused"
        against = f" over {self.champion} (model version {self.champion_model_version})" if self.champion else ""
        return f"{self.version} {verb}{against}: " + "; ".join(self.reasons)


@contextmanager
def promotion_lock(store: Store, fallback_dir: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """An exclusive file lock beside a local SQLite store (else in the project's cache dir)."""
    uri = store.tracking_uri
    folder = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else fallback_dir
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "promote.lock").open("w") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RagtrackError("another promotion holds the lock; try again") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def current_champion(store: Store) -> tuple[str, str] | None:
    """(model version, ragtrack version) the alias points at, or None."""
    try:
        mv = store.client.get_model_version_by_alias(store.registered_model, ALIAS)
    except MlflowException:
        return None
    return str(mv.version), mv.tags.get("ragtrack.version", "?")


def _partial(run: EvalRun) -> list[str]:
    items = run.metrics.get("items", 0)
    return [j for j in ("correctness", "groundedness") if run.metrics.get(f"{j}_n", items) < items]


def decide(store: Store, version: str, rule: Rule, *, dry_run: bool, lock_dir: Path) -> Decision:
    with promotion_lock(store, lock_dir):
        decision = _decide(store, version, rule, dry_run)
        if decision.promoted and not dry_run:
            # Inside the lock nobody else can move it; re-read anyway before writing.
            now = current_champion(store)
            if (now[0] if now else None) != decision.champion_model_version:
                decision.promoted = False
                decision.reasons = ["the champion changed while deciding; run promote again"]
            else:
                store.client.set_registered_model_alias(store.registered_model, ALIAS, decision.model_version)
        _record(store, decision)
    return decision


def _decide(store: Store, version: str, rule: Rule, dry_run: bool) -> Decision:
    challenger = latest_eval_run(store, version)
    champ = current_champion(store)
    decision = Decision(
        version=version,
        run_id=challenger.run_id,
        model_version=challenger.model_version,
        champion=champ[1] if champ else None,
        champion_run_id=None,
        champion_model_version=champ[0] if champ else None,
        promoted=False,
        dry_run=dry_run,
        rule=rule.describe(),
        reasons=[],
        figures={
            f"challenger_{k}": v
            for k, v in challenger.metrics.items()
            if k.split("/")[0]
            in ("correctness", "groundedness", "correctness_n", "groundedness_n", "context_recall", "items")
        },
        gates=[Gate(m, t, challenger.metrics.get(m)) for m, t in sorted(rule.gates.items())],
    )
    refuse = decision.reasons.append
    if champ and champ[0] == challenger.model_version:
        refuse(f"model version {champ[0]} of {version} is already the champion")
        return decision
    if challenger.substituted and not rule.allow_substitutes:
        refuse(
            f"{version}'s eval used substituted models (see rerank_model / embedding_model params); "
            "measure the version as specified, or pass --allow-substitutes"
        )
    if (partial := _partial(challenger)) and not rule.allow_partial:
        refuse(
            f"{version}'s {', '.join(partial)} mean covers fewer than all items (judge errors); "
            "pass --allow-partial to decide anyway"
        )
    for gate in decision.gates:
        if not gate.passed:
            refuse(
                f"gate {gate.metric} >= {gate.minimum:g} failed ({gate.value if gate.value is not None else 'missing'})"
            )

    if champ is None:
        if not decision.reasons:
            decision.promoted = True
            decision.reasons.append("no champion yet: the first evaluated version that passes its gates becomes it")
        return decision

    try:
        incumbent = latest_eval_run(store, champ[1], challenger.golden_digest, challenger.judge_identity)
    except RagtrackError:
        refuse(
            f"the champion {champ[1]} has no eval on the same golden set (digest {challenger.golden_digest}) "
            f"with the same judge; run: ragtrack eval --version {champ[1]}"
        )
        return decision
    decision.champion_run_id = incumbent.run_id
    for problem in comparability_problems(incumbent, challenger):
        refuse(f"not comparable: {problem}")
    if incumbent.substituted and not rule.allow_substitutes:
        refuse("the champion's eval used substituted models; pass --allow-substitutes to compare anyway")
    if (partial := _partial(incumbent)) and not rule.allow_partial:
        refuse(f"the champion's {', '.join(partial)} mean covers fewer than all items; pass --allow-partial")

    rows, _ = compare_records(load_records(store, incumbent.run_id), load_records(store, challenger.run_id), JUDGES)
    overall = {r.metric: r.diff for r in rows if r.scope == "all"}
    if "correctness" not in overall or "groundedness" not in overall:
        refuse("no judged items in common between the two runs")
        return decision
    c, g = overall["correctness"], overall["groundedness"]
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
            "paired_items": float(c.n),
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
    if rule.require_significance and not c.ci_low > 0:
        refuse(f"the correctness gain is not significant: 95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}] includes 0")
    if not decision.reasons:
        decision.promoted = True
        decision.reasons.append(
            f"correctness {c.mean_b:.3f} vs {c.mean_a:.3f} "
            f"(Δ {c.delta:+.3f}, 95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}]), "
            f"groundedness {g.mean_b:.3f} vs {g.mean_a:.3f} (Δ {g.delta:+.3f}) on {c.n} paired items"
        )
    return decision


def _record(store: Store, d: Decision) -> None:
    """Log the decision as a run and tag the model versions with it."""
    outcome = "promoted" if d.promoted else "refused"
    run_id = runs.start_run(
        store,
        f"promote {d.version}" + (" (dry run)" if d.dry_run else ""),
        {
            "version": d.version,
            "challenger_run": d.run_id,
            "champion": d.champion or "none",
            "champion_run": d.champion_run_id or "none",
            "rule": d.rule,
            "outcome": outcome,
        },
        {
            runs.KIND_TAG: "promotion",
            "ragtrack.version": d.version,
            "ragtrack.outcome": outcome,
            "ragtrack.dry_run": str(d.dry_run).lower(),
        },
        experiment_id=store.decisions_experiment_id,
    )
    runs.log_metrics(store, run_id, {k: float(v) for k, v in d.figures.items()})
    runs.log_json(
        store, run_id, "decision.json", {**asdict(d), "gates": [{**asdict(g), "passed": g.passed} for g in d.gates]}
    )
    runs.finish_run(store, run_id, complete=True)
    d.decision_run_id = run_id
    if d.dry_run:
        return
    note = f"{outcome}: {'; '.join(d.reasons)}"[:5000]
    store.client.set_model_version_tag(store.registered_model, d.model_version, "ragtrack.decision", note)
    store.client.set_model_version_tag(store.registered_model, d.model_version, "ragtrack.decision_run", run_id)
    if d.champion_model_version and d.champion_model_version != d.model_version:
        store.client.set_model_version_tag(
            store.registered_model,
            d.champion_model_version,
            "ragtrack.last_challenge",
            f"{d.version} {outcome} ({run_id})",
        )
