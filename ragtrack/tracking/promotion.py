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

Crash consistency. A store has no transaction across these writes, so a real
promotion takes :data:`STEPS` in order, and the decision run says how far it
got (``ragtrack.decision_state``, :class:`DecisionState`). Its decision is
recorded in full (``pending``) before anything it decides is applied; the
descriptions the alias move would make stale first say that a promotion is
being recorded; only then does the alias move, and the run is ``done`` (and
FINISHED) last. A process killed anywhere leaves nothing, a run still
``writing`` (nothing applied: abandoned), or a ``pending`` one, which the next
``promote`` finishes under the same lock before it decides — every step after
the record is idempotent. Commands that only read say what is unfinished
(:func:`unfinished`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import asdict, fields

from ragtrack.evaluation.promotion import CRITERION, GUARD, Decision, Gate, Rule
from ragtrack.tracking import descriptions, standings
from ragtrack.tracking.store import DecisionState, Store, Tag

log = logging.getLogger(__name__)

#: A real promotion's steps, in order (a refusal skips announce and alias; a dry run or a decision
#: about the champion itself goes from commit to finish). The crash tests kill ``promote`` as each begins.
STEPS = ("lock", "decide", "record", "commit", "announce", "alias", "tag", "describe", "refresh", "finish", "unlock")


def begin(step: str) -> None:
    """``step`` of :data:`STEPS` begins (debug-logged: where a promote stopped)."""
    log.debug("promote: %s", step)


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

    A real promotion first finishes any a killed promote left unfinished (see the module docstring);
    ``Decision.notes`` says which. A ``--limit`` run is a check, not a verdict: the newest full eval is
    judged when there is one (with ``rule.allow_partial`` the newest of any)."""
    begin("lock")
    with nullcontext() if dry_run else store.registry_lock("promotion"):
        notes = ([] if dry_run else finish_interrupted(store, standing_rule(rule))) + unfinished(store)
        begin("decide")
        store.latest_eval(version, model_version=model_version)  # none: its error says what to run
        runs = store.eval_runs(version, model_version=model_version)
        run = runs[0] if rule.allow_partial else next((r for r in runs if not r.limited), runs[0])
        decision = standings.standing(store, run, rule, metrics=(CRITERION, GUARD, *rule.guards)).decision
        decision.dry_run = dry_run
        decision.notes = notes
        if decision.promoted and not dry_run:
            # Inside the lock nobody else can move it; re-read anyway before writing.
            now = store.champion()
            if (now[0] if now else None) != decision.champion_model_version:
                decision.promoted = False
                decision.reasons = ["the champion changed while deciding; run promote again"]
        started = _record(store, decision, source or {})
        if not (dry_run or decision.already_champion):  # nothing moved: the registry keeps the decision that made it
            _apply(store, decision, started, standing_rule(rule))
        _finish(store, decision.decision_run_id)
        begin("unlock")
    return decision


def _record(store: Store, d: Decision, source: Mapping[str, str]) -> int:
    """Log the decision as a run (``writing``, then ``pending`` once all of it is there); its start time."""
    begin("record")
    outcome = d.outcome
    flags = f" ({d.flags})" if d.flags else ""
    run_id = store.start_run(
        # The decisions table lists runs by name: the outcome and its overrides tell two "promote v5" apart.
        f"promote {d.version}: {outcome}{flags}" + (" (dry run)" if d.dry_run else ""),
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
            "overrides": "; ".join(d.overrides) or Tag.NONE,
        },
        {
            Tag.KIND: "promotion",
            Tag.VERSION: d.version,
            Tag.OUTCOME: outcome,
            Tag.OVERRIDES: d.flags or Tag.NONE,
            Tag.DRY_RUN: str(d.dry_run).lower(),
            Tag.DECISION_STATE: DecisionState.WRITING,
            **source,
        },
        experiment_id=store.decisions_experiment_id,
    )
    d.decision_run_id = run_id
    describe_decisions(store)
    store.log_metrics(run_id, {k: float(v) for k, v in d.figures.items()})
    store.log_json(
        run_id, "decision.json", {**asdict(d), "gates": [{**asdict(g), "passed": g.passed} for g in d.gates]}
    )
    started = store.client.get_run(run_id).info.start_time
    store.describe_run(run_id, descriptions.decision(d, started, descriptions.Links(store.registered_model)))
    begin("commit")  # from here on, the decision is applied even if this process dies
    store.tag_run(run_id, {Tag.DECISION_STATE: DecisionState.PENDING})
    return started


#: The decisions experiment's saved runs view: each decision's outcome and overrides beside its figures.
DECISIONS_VIEW = "ragtrack-decisions"


def describe_decisions(store: Store) -> None:
    """The decisions experiment's description and its saved view of outcomes and overrides."""
    columns = [
        f"tags.`{Tag.VERSION}`",
        f"tags.`{Tag.OUTCOME}`",
        f"tags.`{Tag.OVERRIDES}`",
        f"tags.`{Tag.DRY_RUN}`",
        *(f"metrics.`{k}`" for k in ("correctness_delta", "correctness_ci_low", "groundedness_delta")),
    ]
    experiment = store.decisions_experiment_id
    view = store.save_runs_view(DECISIONS_VIEW, "ragtrack: decisions", columns, experiment)
    store.describe_experiment(descriptions.decisions_experiment(view), experiment)


def standing_rule(rule: Rule) -> Rule:
    """The rule the eval runs' standings are re-decided by after a decision: the project's gates and node
    guards, none of one decision's one-off flags (a --margin of this promote is not theirs)."""
    return Rule(gates=rule.gates, guards=rule.guards)


def _apply(store: Store, d: Decision, started_ms: int, rule: Rule, announce: bool = True) -> None:
    """What a recorded decision changes: the alias, the versions' tags and descriptions, the eval runs'
    standings (re-decided by ``rule``, :func:`standing_rule`). Every step may be taken again (by
    :func:`finish_interrupted`) with the same result."""
    if d.promoted:
        begin("announce")
        if announce:
            _announce(store, d)
        begin("alias")
        store.set_champion(d.model_version)
    begin("tag")
    # A row of the version's tag table: the outcome and its overrides; the reasons are in its description.
    note = d.outcome + (f" ({d.flags})" if d.flags else "")
    store.tag_model_version(d.model_version, {Tag.DECISION: note, Tag.DECISION_RUN: d.decision_run_id})
    if d.champion_model_version and d.champion_model_version != d.model_version:
        store.tag_model_version(
            d.champion_model_version, {Tag.LAST_CHALLENGE: f"{d.version} {d.outcome} ({d.decision_run_id})"}
        )
    begin("describe")
    describe_champion(store, _involved(d), d, started_ms)
    begin("refresh")
    # As `ragtrack promote <version>` would decide them: a one-off --margin of this decision is not theirs.
    standings.refresh(store, rule)


def _finish(store: Store, run_id: str) -> None:
    begin("finish")
    store.tag_run(run_id, {Tag.DECISION_STATE: DecisionState.DONE})
    store.finish_run(run_id)


def _announce(store: Store, d: Decision) -> None:
    """Head every description the alias move makes stale with :func:`descriptions.promotion_under_way`."""
    banner = descriptions.promotion_under_way(d, descriptions.Links(store.registered_model))
    involved = list(_involved(d))
    now = store.registry_descriptions(involved)
    below = {key: f"{banner}\n\n---\n\n{text}" if text else banner for key, text in now.items()}
    store.describe_registered_model(below["model"])
    store.describe_experiment(below["experiment"])
    for mv in involved:
        store.describe_model_version(mv, below[mv])


def _involved(d: Decision) -> dict[str, str]:
    """The model versions a decision is about (model version → agent version name), challenger first."""
    involved = {d.model_version: d.version}
    if d.champion_model_version:
        involved.setdefault(d.champion_model_version, d.champion or "?")
    return involved


def finish_interrupted(store: Store, rule: Rule) -> list[str]:
    """Finish every promotion a killed ``promote`` left unfinished (call it holding the promotion lock:
    then no unfinished run is another's work under way); what was done, a sentence each.

    A ``pending`` run is applied from the start of its registry steps (each is idempotent); one cut
    short while ``writing`` had applied nothing and is marked abandoned, as is a pending promotion
    whose alias was moved meanwhile by someone else (by hand: it is not moved back)."""
    done = []
    for run in store.unfinished_decisions():
        run_id, version = run.info.run_id, run.data.tags.get(Tag.VERSION, "?")
        d = _recorded_decision(store, run)
        if d is None:
            _abandon(store, run_id, "the promote was stopped before its decision was recorded")
            done.append(f"closed an interrupted promotion of {version} (run {run_id}): stopped before it decided")
            continue
        champion = store.champion()
        now = champion[0] if champion else None
        if d.promoted and now not in (d.model_version, d.champion_model_version):
            _abandon(store, run_id, f"the champion alias was moved to model version {now} while it was being applied")
            describe_champion(store, _involved(d), None, 0)  # take its "being recorded" notes down
            done.append(f"abandoned an interrupted promotion of {version} (run {run_id}): the alias was moved since")
            continue
        _apply(store, d, run.info.start_time, rule, announce=False)
        _finish(store, run_id)
        done.append(f"finished recording an interrupted promotion: {d.summary()} (decision run {run_id})")
    return done


def unfinished(store: Store) -> list[str]:
    """What a reader of the registry must know about the champion before trusting it, a sentence each:
    a promotion not fully recorded (under way, or interrupted: the next ``promote`` finishes it), or a
    champion that no recorded decision made (the alias set by hand, or by a promote from before
    promotions were recorded first)."""
    notes = []
    runs = store.unfinished_decisions()
    holder = store.lock_holder("promotion") if runs else None
    how = f"under way ({holder})" if holder else "it was interrupted; the next `ragtrack promote` finishes it"
    for run in runs:
        notes.append(
            f"a promotion of {run.data.tags.get(Tag.VERSION, '?')} (decision run {run.info.run_id[:8]}) "
            f"is not fully recorded: {how}"
        )
    champion = store.champion()
    if not notes and champion and standings.champion_since(store, champion[0]) is None:
        notes.append(
            f"the champion {champion[1]} (model version {champion[0]}) has no recorded promotion decision: "
            "its alias was set outside `ragtrack promote` (by hand in the registry?)"
        )
    return notes


def _recorded_decision(store: Store, run) -> Decision | None:
    """The decision a promotion run recorded (``decision.json``), or None if it never got that far."""
    if run.data.tags.get(Tag.DECISION_STATE) == DecisionState.WRITING:
        return None
    text = store.read_text(run.info.run_id, "decision.json")
    if text is None:
        return None
    data = json.loads(text)
    known = {f.name for f in fields(Decision)} - {"gates"}
    gates = [Gate(g["metric"], g["minimum"], g["value"]) for g in data.get("gates", [])]
    d = Decision(**{k: v for k, v in data.items() if k in known}, gates=gates)
    d.decision_run_id = run.info.run_id
    return d


def _abandon(store: Store, run_id: str, why: str) -> None:
    store.tag_run(run_id, {Tag.DECISION_STATE: DecisionState.ABANDONED})
    store.describe_run(run_id, descriptions.abandoned(why))
    store.finish_run(run_id, "FAILED")


def describe_champion(store: Store, involved: Mapping[str, str], d: Decision | None, started_ms: int) -> None:
    """Rewrite the descriptions of the model versions ``involved`` (model version → name) and of any
    other whose first line no longer holds (a former champion's "v2 is" once v3 beat v2), of the
    registered model and of the experiment as the registry now stands; the decision ``d`` (if any) is
    told in full on its challenger's page, earlier ones in a line each."""
    to = descriptions.Links(store.registered_model)
    champion = store.champion()
    since = standings.champion_since(store, champion[0]) if champion else None
    involved = dict(involved)
    for mv in store.model_versions():
        number, version = str(mv.version), mv.tags.get(Tag.VERSION, "?")
        head = descriptions.model_version_head(version, number, champion)
        if number not in involved and mv.description and not mv.description.startswith(head):
            involved[number] = version
    for mv, version in involved.items():
        challenger = d is not None and mv == d.model_version
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
