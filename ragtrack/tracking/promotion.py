"""Applying the promotion rule to the store: read the runs, decide under a lock, move the alias, record.

The rule itself is :func:`ragtrack.evaluation.promotion.decide`, a pure
function; :func:`ragtrack.tracking.standings.standing` feeds it a run and the
current champion's comparable eval, paired item by item — for ``promote`` and
for an eval run's own description alike. Here the decision runs under an
exclusive lock held in the registry itself (:meth:`Store.registry_lock`) and
reads the champion inside it, so two concurrent promotions — from two
processes or two machines — cannot both win against the same (stale)
champion. Every decision — pass or refusal — is logged as a ``promotion`` run
with its figures; a real one (not a dry run) also tags and describes the model
versions involved (why each is or is not champion, since when, the decisions
about it), the registered model (who is champion and why), the experiment (its
leaderboard) and the eval runs not yet compared with the champion it leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import asdict

from ragtrack.evaluation.promotion import CRITERION, GUARD, Decision, Rule
from ragtrack.tracking import descriptions, standings
from ragtrack.tracking.store import Store, Tag


def promote(
    store: Store,
    version: str,
    rule: Rule,
    *,
    dry_run: bool,
    model_version: str | None = None,
    source: Mapping[str, str] | None = None,
) -> Decision:
    """Decide on ``version``'s latest eval (of ``model_version``: the spec as it is now, when known);
    on success (and not a dry run) move the alias. A dry run moves nothing, so it takes no lock: a CI
    gate does not wait behind a promotion (or a lock a crashed promoter left) to read the champion.
    ``source``: tags naming the checkout that decided (:func:`ragtrack.tracking.runs.source_tags`).

    A ``--limit`` run is a check, not a verdict: the newest full eval is judged when there is one
    (with ``rule.allow_partial`` the newest of any)."""
    with nullcontext() if dry_run else store.registry_lock("promotion"):
        store.latest_eval(version, model_version=model_version)  # none: its error says what to run
        runs = store.eval_runs(version, model_version=model_version)
        run = runs[0] if rule.allow_partial else next((r for r in runs if not r.limited), runs[0])
        decision = standings.standing(store, run, rule, metrics=(CRITERION, GUARD)).decision
        decision.dry_run = dry_run
        if decision.promoted and not dry_run:
            # Inside the lock nobody else can move it; re-read anyway before writing.
            now = store.champion()
            if (now[0] if now else None) != decision.champion_model_version:
                decision.promoted = False
                decision.reasons = ["the champion changed while deciding; run promote again"]
            else:
                store.set_champion(decision.model_version)
        _record(store, decision, rule, source or {})
    return decision


def _record(store: Store, d: Decision, rule: Rule, source: Mapping[str, str]) -> None:
    """Log the decision as a run; a real one also tags and describes the model versions and the model."""
    outcome = d.outcome
    run_id = store.start_run(
        f"promote {d.version}" + (" (dry run)" if d.dry_run else ""),
        {
            "version": d.version,
            "challenger_run": d.run_id,
            "model_version": d.model_version,
            "champion": d.champion or "none",
            "champion_run": d.champion_run_id or "none",
            "champion_model_version": d.champion_model_version or "none",
            "rule": d.rule,
            "outcome": outcome,
            "summary": d.summary(),
        },
        {
            Tag.KIND: "promotion",
            Tag.VERSION: d.version,
            Tag.OUTCOME: outcome,
            Tag.DRY_RUN: str(d.dry_run).lower(),
            **source,
        },
        experiment_id=store.decisions_experiment_id,
    )
    store.log_metrics(run_id, {k: float(v) for k, v in d.figures.items()})
    store.log_json(
        run_id, "decision.json", {**asdict(d), "gates": [{**asdict(g), "passed": g.passed} for g in d.gates]}
    )
    d.decision_run_id = run_id
    started = store.client.get_run(run_id).info.start_time
    store.describe_run(run_id, descriptions.decision(d, started, descriptions.Links(store.registered_model)))
    store.finish_run(run_id)
    if d.dry_run or d.already_champion:  # nothing moved: the registry keeps the decision that made it champion
        return
    note = f"{outcome}: {'; '.join(d.reasons)}"[:5000]
    store.tag_model_version(d.model_version, {Tag.DECISION: note, Tag.DECISION_RUN: run_id})
    if d.champion_model_version and d.champion_model_version != d.model_version:
        store.tag_model_version(d.champion_model_version, {Tag.LAST_CHALLENGE: f"{d.version} {outcome} ({run_id})"})
    describe_champion(store, d, started)
    # As `ragtrack promote <version>` would decide them: a one-off --margin of this decision is not theirs.
    standings.refresh(store, Rule(gates=rule.gates))


def describe_champion(store: Store, d: Decision, started_ms: int) -> None:
    """Rewrite what the decision ``d`` changes: the descriptions of both model versions and of the model."""
    to = descriptions.Links(store.registered_model)
    champion = store.champion()
    since = standings.champion_since(store, champion[0]) if champion else None
    involved = {d.model_version: d.version}
    if d.champion_model_version:
        involved.setdefault(d.champion_model_version, d.champion or "?")
    for mv, version in involved.items():
        challenger = mv == d.model_version  # this decision is told in full; earlier ones in a line each
        history = [
            descriptions.PastDecision(r.info.run_id, r.info.start_time, r.data.params.get("summary", ""))
            for r in store.decision_runs(mv)
            if not (challenger and r.info.run_id == d.decision_run_id)
        ]
        store.describe_model_version(
            mv,
            descriptions.model_version(
                version,
                mv,
                champion,
                since[0] if since and champion[0] == mv else None,
                descriptions.decision(d, started_ms, to) if challenger else "",
                history,
                to,
            ),
        )
    why = f"{since[1]} ([decision run]({to.run(since[2])}))" if since else ""
    store.describe_registered_model(
        descriptions.registered_model(store.registered_model, champion, since[0] if since else None, why, to)
    )
    standings.describe_experiment(store)
