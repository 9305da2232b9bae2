"""How each eval run stands against the champion, written where the MLflow UI shows it.

An eval run's description, its ``delta/*`` metrics (against the champion's
model version, named in ``ragtrack.compared_to``), its ``regressions.json``
and its ``per_type.png`` depend on who is champion. They are written when the
run is recorded and again whenever a promotion decision is recorded, for the
newest eval of each model version whose page names another champion
(``ragtrack.standing``) — so after ``ragtrack promote v1`` the eval of v5 that
ran before says by how much it beats v1, and after ``ragtrack promote v5``
it says that v5 is the champion.
The experiment's description (a leaderboard at the top of every page of the
experiment) and its saved "versions side by side" view are kept here too.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from ragtrack.errors import RagtrackError
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.clustering import cluster_labels
from ragtrack.evaluation.compare import compare_records, overall
from ragtrack.evaluation.promotion import Champion, Rule, Standing, decide
from ragtrack.records import ItemRecord, RunSummary
from ragtrack.spec import version_order
from ragtrack.tracking import descriptions
from ragtrack.tracking.compare import REGRESSIONS_TABLE, comparison_metrics, log_regressions, per_type_plot
from ragtrack.tracking.models import describe_logged_model
from ragtrack.tracking.store import Store, Tag

#: The runs-table view ragtrack keeps: every eval run with the figures that compare versions.
VERSIONS_VIEW = "ragtrack-versions"


def standing(
    store: Store,
    challenger: RunSummary,
    rule: Rule,
    records: list[ItemRecord] | None = None,
    metrics: tuple[str, ...] | None = None,
) -> Standing:
    """``challenger`` against the current champion: the rule's decision (nothing moves) and its evidence.

    The champion's latest eval on the challenger's golden set and judge is paired
    with ``records`` (default: the challenger run's logged ones) over ``metrics``
    (default: every comparable metric).
    """
    current = store.champion()
    if current is None:
        decision = decide(challenger, None, rule)
        past = [mv for mv in store.model_versions() if mv.tags.get(Tag.DECISION, "").startswith("promoted")]
        if past:  # the alias was removed by hand (or the registry edited): say so beside the verdict
            mv = past[0]
            decision.reasons.append(
                f"note: the champion alias is not set, though {mv.tags.get(Tag.VERSION, '?')} (model version "
                f"{mv.version}) was promoted before; if the alias was removed by mistake, set it back in the "
                "registry before promoting"
            )
        return Standing(decision)
    model_version, name = current
    try:
        incumbent = store.latest_eval(name, challenger.golden_digest, challenger.judge_identity, model_version)
    except RagtrackError:
        incumbent = None
    rows, changes, theirs = [], [], []
    if incumbent is not None and model_version != challenger.model_version:
        mine = records if records is not None else store.records(challenger.run_id)
        theirs = store.records(incumbent.run_id)
        rows, changes = compare_records(theirs, mine, metrics, cluster_labels(mine, rule.cluster))
    decision = decide(challenger, Champion(model_version, name, incumbent), rule, overall(rows) if rows else None)
    return Standing(decision, incumbent, tuple(rows), tuple(changes), tuple(theirs))


def deltas(standing: Standing | None) -> dict[str, float]:
    """The comparison with the champion an eval run logs: ``delta/*`` figures of the core metrics, all items."""
    rows = [r for r in standing.rows if r.scope == m.ALL and r.metric in m.CORE] if standing else []
    return {k: m.for_display(v) for k, v in comparison_metrics(rows).items()}


def describe_eval(
    store: Store,
    run: RunSummary,
    params: dict[str, str],
    records: list[ItemRecord],
    diagnosis: str,
    standing: Standing | None,
    model_id: str | None,
) -> None:
    """Everything of an eval run that depends on the champion: comparison tags, plot, descriptions.

    ``run`` carries the run's metrics, its ``delta/*`` ones included.
    """
    compared = bool(standing and standing.rows and standing.champion)
    if compared:
        store.tag_run(
            run.run_id,
            {Tag.COMPARED_TO: standing.decision.champion_model_version, Tag.COMPARED_RUN: standing.champion.run_id},
        )
    if standing is not None:  # what refresh() reads to find the pages a new champion makes stale
        store.tag_run(run.run_id, {Tag.STANDING: standing.decision.champion_model_version or Tag.NONE})
    _log_plot(store, run.run_id, run, standing)
    links = descriptions.Links(store.registered_model)
    regressions = ""
    if compared:
        both = (list(standing.champion_records), records)
        table = log_regressions(store, run.run_id, standing.champion, run, both, standing.changes)
        route = links.artifact(store.experiment_id, run.run_id, REGRESSIONS_TABLE)
        regressions = descriptions.regressions_line(table, route)
    elif _was_compared_before_it_won(store, run, standing):  # that comparison stays readable on its page
        route = links.artifact(store.experiment_id, run.run_id, REGRESSIONS_TABLE)
        regressions = (
            f"**Regressions** against model version {run.compared_to}, the champion this run was compared "
            f"with before it became champion: [regressions.json]({route})."
        )
    from ragtrack.report import error_lines

    errors = error_lines(records)
    store.describe_run(
        run.run_id, descriptions.eval_run(run, params, diagnosis, len(records), standing, links, errors, regressions)
    )
    if model_id:
        describe_logged_model(store, model_id, run, params)
    if len(records) == int(params.get("golden_items", len(records))):
        compared_to = standing.decision.champion_model_version if compared else ""
        describe_experiment(store, replace(run, compared_to=compared_to or ""))


def _was_compared_before_it_won(store: Store, run: RunSummary, standing: Standing | None) -> bool:
    """``run`` is the champion's eval and holds the regressions table of a comparison with an earlier champion."""
    if not (standing and standing.decision.already_champion and run.compared_to not in ("", run.model_version)):
        return False
    return REGRESSIONS_TABLE in {f.path for f in store.client.list_artifacts(run.run_id)}


def refresh(store: Store, rule: Rule) -> list[str]:
    """Re-describe every eval run whose page was written against another champion than the current one
    (its ``ragtrack.standing`` tag): the newest eval of each model version on each golden set and judge,
    the runs ``compare`` and ``promote`` read — the champion's own included, which now says it is the
    champion. Older evals of the same model version keep the page they had. Their run IDs."""
    champion = store.champion()
    now = champion[0] if champion else Tag.NONE
    latest: dict[tuple[str, str, str], RunSummary] = {}
    for run in store.eval_runs():  # newest first
        latest.setdefault((run.model_version, run.golden_digest, run.judge_identity), run)
    refreshed = []
    for run in latest.values():
        if run.standing == now:
            continue
        records = store.records(run.run_id)
        found = standing(store, run, rule, records)
        more = deltas(found)
        data = store.client.get_run(run.run_id).data
        model_id = data.tags.get(Tag.MODEL_ID)
        if more:
            store.log_metrics(run.run_id, more, model_id)
        diagnosis = store.read_text(run.run_id, "diagnosis.md") or ""
        shown = replace(run, metrics={**run.metrics, **more})
        describe_eval(store, shown, data.params, records, diagnosis, found, model_id)
        refreshed.append(run.run_id)
    return refreshed


def _log_plot(store: Store, run_id: str, run: RunSummary, standing: Standing | None) -> None:
    """``per_type.png``: this run per question type, beside the champion's eval when it was compared."""
    runs = [standing.champion, run] if standing and standing.rows and standing.champion else [run]
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "per_type.png"
        per_type_plot(runs, png)
        store.log_file(run_id, png)


def champion_since(store: Store, model_version: str) -> tuple[int, str, str] | None:
    """(when, summary, run ID) of the decision that made ``model_version`` champion."""
    for r in store.decision_runs(model_version):  # newest first
        p = r.data.params
        if p.get("model_version") == model_version and p.get("outcome") == "promoted":
            return r.info.start_time, p.get("summary", ""), r.info.run_id
    return None


def describe_experiment(store: Store, current: RunSummary | None = None) -> None:
    """The experiment's description (on top of every page of it) and its "versions side by side" view.

    ``current`` is an eval run being recorded: not complete yet, so not found by a search.
    """
    columns = [
        "tags.`ragtrack.version`",
        *(f"metrics.`{name}`" for name in m.CORE),
        *(f"metrics.`{m.comparison_key(figure, m.CORE[0])}`" for figure in m.COMPARISON_FIGURES),
        f"tags.`{Tag.COMPARED_TO}`",
        "attributes.`Dataset`",
    ]
    view = store.save_runs_view(VERSIONS_VIEW, "ragtrack: versions side by side", columns)
    champion = store.champion()
    since = champion_since(store, champion[0]) if champion else None
    runs = store.eval_runs()
    if current is not None:
        runs = [current, *(r for r in runs if r.run_id != current.run_id)]
    # A quick --limit check or an --allow-stale look at an edited corpus is not what the versions stand on:
    # the leaderboard follows the champion's newest full eval (any run only when there is none).
    runs = [r for r in runs if not (r.limited or r.stale_gt)] or runs
    reference = next((r for r in runs if champion and r.model_version == champion[0]), runs[0] if runs else None)
    latest: dict[str, RunSummary] = {}
    for r in runs:  # newest first: the latest comparable eval of each version
        if reference and (r.golden_digest, r.judge_identity) == (reference.golden_digest, reference.judge_identity):
            latest.setdefault(r.version, r)
    store.describe_experiment(
        descriptions.experiment(
            champion,
            since[0] if since else None,
            sorted(latest.values(), key=lambda r: version_order(r.version)),
            view,
            descriptions.Links(store.registered_model),
        )
    )
