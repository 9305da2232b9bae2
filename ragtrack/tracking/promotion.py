"""Applying the promotion rule to the store: read the runs, decide under a lock, move the alias, record.

The rule itself is :func:`ragtrack.evaluation.promotion.decide`, a pure
function. Here the decision runs under an exclusive lock held in the registry
itself (:meth:`Store.promotion_lock`) and reads the champion inside it, so two
concurrent promotions — from two processes or two machines — cannot both win
against the same (stale) champion. Every decision — pass or refusal — is
logged as a ``promotion`` run with its figures, and tagged on the model
versions involved.
"""

from __future__ import annotations

from dataclasses import asdict

from ragtrack.errors import RagtrackError
from ragtrack.evaluation.compare import compare_records, overall
from ragtrack.evaluation.promotion import CRITERION, GUARD, Champion, Decision, Rule, decide
from ragtrack.tracking.store import Store, Tag


def promote(store: Store, version: str, rule: Rule, *, dry_run: bool) -> Decision:
    """Decide on ``version``'s latest eval; on success (and not a dry run) move the alias."""
    with store.promotion_lock():
        decision = _decide(store, version, rule)
        decision.dry_run = dry_run
        if decision.promoted and not dry_run:
            # Inside the lock nobody else can move it; re-read anyway before writing.
            now = store.champion()
            if (now[0] if now else None) != decision.champion_model_version:
                decision.promoted = False
                decision.reasons = ["the champion changed while deciding; run promote again"]
            else:
                store.set_champion(decision.model_version)
        _record(store, decision)
    return decision


def _decide(store: Store, version: str, rule: Rule) -> Decision:
    challenger = store.latest_eval(version)
    current = store.champion()
    if current is None:
        return decide(challenger, None, rule)
    model_version, name = current
    try:
        incumbent = store.latest_eval(name, challenger.golden_digest, challenger.judge_identity)
    except RagtrackError:
        incumbent = None
    champion = Champion(model_version, name, incumbent)
    paired = None
    if incumbent is not None and model_version != challenger.model_version:
        rows, _ = compare_records(store.records(incumbent.run_id), store.records(challenger.run_id), (CRITERION, GUARD))
        paired = overall(rows)
    return decide(challenger, champion, rule, paired)


def _record(store: Store, d: Decision) -> None:
    """Log the decision as a run and tag the model versions with it."""
    outcome = "promoted" if d.promoted else "refused"
    run_id = store.start_run(
        f"promote {d.version}" + (" (dry run)" if d.dry_run else ""),
        {
            "version": d.version,
            "challenger_run": d.run_id,
            "champion": d.champion or "none",
            "champion_run": d.champion_run_id or "none",
            "rule": d.rule,
            "outcome": outcome,
        },
        {Tag.KIND: "promotion", Tag.VERSION: d.version, Tag.OUTCOME: outcome, Tag.DRY_RUN: str(d.dry_run).lower()},
        experiment_id=store.decisions_experiment_id,
    )
    store.log_metrics(run_id, {k: float(v) for k, v in d.figures.items()})
    store.log_json(
        run_id, "decision.json", {**asdict(d), "gates": [{**asdict(g), "passed": g.passed} for g in d.gates]}
    )
    store.finish_run(run_id)
    d.decision_run_id = run_id
    if d.dry_run:
        return
    note = f"{outcome}: {'; '.join(d.reasons)}"[:5000]
    store.tag_model_version(d.model_version, {Tag.DECISION: note, Tag.DECISION_RUN: run_id})
    if d.champion_model_version and d.champion_model_version != d.model_version:
        store.tag_model_version(d.champion_model_version, {Tag.LAST_CHALLENGE: f"{d.version} {outcome} ({run_id})"})
