"""Deciding between versions: compare two, promote one, list them all."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ragtrack.api.arguments import checked_arguments
from ragtrack.api.evaluation import load_human_labels, load_inputs, with_llm
from ragtrack.config import ProjectConfig, load_config
from ragtrack.errors import RagtrackError
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.clustering import cluster_labels, describe
from ragtrack.evaluation.compare import (
    ItemChange,
    MetricRow,
    comparability_problems,
    compare_records,
    cutoff_note,
    rank_depth,
)
from ragtrack.evaluation.human_labels import PPIReport, delta_figures, match
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.power import Power, power_of
from ragtrack.evaluation.promotion import Decision, Rule
from ragtrack.golden import EXAMPLE_CAUTION
from ragtrack.records import RunSummary
from ragtrack.spec import BUILTIN_VERSIONS, load_spec, resolve_spec_path, version_order
from ragtrack.tracking.compare import log_comparison
from ragtrack.tracking.promotion import promote as promote_in_store
from ragtrack.tracking.promotion import unfinished
from ragtrack.tracking.source import source_tags
from ragtrack.tracking.store import Store, open_store


@dataclass
class ComparisonReport:
    """Two eval runs paired item by item: ``rows`` one :class:`MetricRow` per metric and scope (overall,
    per type) with the paired difference b − a, its bootstrap interval and p-value; ``changes`` the items
    whose scores moved, largest first; ``run_id`` the comparison run logged ("" with ``log=False``);
    ``warnings`` what makes the two less comparable. :meth:`text` is the table ``ragtrack compare`` logs."""

    a: RunSummary
    b: RunSummary
    rows: list[MetricRow]
    changes: list[ItemChange]
    run_id: str
    warnings: list[str]
    clustering: str = "document"  # what the intervals and tests resampled (ragtrack.evaluation.clustering)
    clusters: str = ""  # in words: "clustered by the GT document …: 16 clusters of 48 items"
    power: list[Power] = field(default_factory=list)  # the MDE of each primary metric at this set's size
    ppi: PPIReport | None = None  # the judged metrics' prediction-powered Δ from human labels, if any

    def text(self) -> str:
        """The comparison as plain text (the ``comparison.md`` artifact of the comparison run)."""
        from ragtrack.report import comparison_text

        return comparison_text(self.a, self.b, self.rows, self.changes, self.clusters, self.power, self.ppi)


@checked_arguments
def compare(
    version_a: str,
    version_b: str,
    *,
    root: str | Path = ".",
    golden_path: str | None = None,
    tracking_uri: str | None = None,
    allow_incomparable: bool = False,
    log: bool = True,
    llm: str | None = None,
    cluster: str | None = None,
    delta: float | None = None,
    human_labels: str | None = None,
) -> ComparisonReport:
    """The latest comparable eval runs of two versions, side by side with paired statistics.

    B's latest complete run picks the golden digest and judge (or ``golden_path``
    does); A's latest run with the same ones is its partner. When A has none, the
    latest golden set and judge both were evaluated on is used, and a warning says
    so (a quick ``--limit`` run of B does not hide its full-set comparison).

    Each side is the spec as it is in this checkout (as for ``promote``); ``champion``
    as A names the registry's champion, so a branch that keeps the champion's name
    (``pipelines/bm25.toml`` evolving through pull requests) is compared with it:
    the two sides are then labelled ``bm25@1`` and ``bm25@3`` (name@model version). ``llm``: B as
    ``eval --llm`` ran it. ``cluster`` names what the intervals resample (default ``[compare] cluster``,
    the GT document); ``delta`` a difference whose items-needed the power figures state.
    ``human_labels`` names a file of human labels of versions' answers (default ``[project] human_labels``,
    else golden/labels/human-labels.jsonl when present): where both versions' answers to the same items
    are labelled, each judged metric's Δ gets its prediction-powered estimate and interval (``ppi``).
    """
    if version_b == CHAMPION:
        raise RagtrackError(f"`{CHAMPION}` goes first, as A: ragtrack compare {CHAMPION} {version_a}")
    config = load_config(root)
    labels = load_human_labels(config, human_labels)  # a bad line stops here, before anything is logged
    store = open_store(config, tracking_uri, existing=True, writing=log)
    asked_champion = version_a == CHAMPION
    if version_a == CHAMPION:
        if (champion := store.champion()) is None:
            raise RagtrackError("there is no champion yet: ragtrack promote a version first")
        version_a, pinned_a = champion[1], champion[0]
    else:
        pinned_a = _checked_out(store, version_a, _known(store, config, version_a), config)
    pinned_b = _checked_out(store, version_b, _known(store, config, version_b), config, llm)
    if version_a == version_b and pinned_a == pinned_b:  # one run against itself: every difference 0
        if asked_champion:  # main's job after the merge, or a re-run: not an error (promote says the same)
            raise SameAsChampion(f"{version_b} (model version {pinned_b}) is the champion: nothing to compare")
        raise RagtrackError(
            f"compare needs two versions; both are {version_a}"
            + (f" (model version {pinned_a})" if pinned_a else "")
            + f" (`ragtrack compare {CHAMPION} {version_b}` compares this checkout's spec with the champion)"
        )
    digest = load_inputs(config, None, golden_path)[1].digest if golden_path else None
    runs_b = store.eval_runs(version_b, digest, model_version=pinned_b)
    latest = b = runs_b[0] if runs_b else store.latest_eval(version_b, digest, model_version=pinned_b)
    runs_a = store.eval_runs(version_a, digest, model_version=pinned_a)
    shared = {(r.golden_digest, r.judge_identity): r for r in reversed(runs_a)}
    common = next((r for r in runs_b if (r.golden_digest, r.judge_identity) in shared), None)
    if common is not None:
        b, a = common, shared[(common.golden_digest, common.judge_identity)]  # each side's newest on that set
    else:
        if not allow_incomparable:
            raise RagtrackError(
                f"{version_a} has no eval on the golden set and judge of {version_b}'s latest run "
                f"(digest {b.golden_digest}, {int(b.metrics.get(m.ITEMS, 0))} items, judge {b.judge_identity}); "
                f"run: ragtrack eval --version {version_a} with the --golden, --corpus, --limit and --judge "
                "that run used "
                f"(or evaluate {version_b} again on the set you meant)"
            ) from None
        a = store.latest_eval(version_a, model_version=pinned_a)
    labelled_as = (a.version, b.version)  # the names label files use (not bm25@1, bm25@3)
    if a.version == b.version:  # "bm25 vs bm25": which column is the branch?
        a = replace(a, version=f"{a.version}@{a.model_version}")
        b = replace(b, version=f"{b.version}@{b.model_version}")
    for run in (a, b):  # every question failed (a platform down): a table of nothing, logged as a comparison
        if run.metrics.get(m.ITEMS) and run.metrics.get(m.UNANSWERED, 0) >= run.metrics[m.ITEMS]:
            raise RagtrackError(
                f"{run.version}'s latest eval ({run.run_id[:8]}) got no answer to any question: nothing to compare "
                f"(its errors: ragtrack ui, or its items.jsonl); run: ragtrack eval --version {run.version}"
            )
    warnings = comparability_problems(a, b) + (unfinished(store) if asked_champion else [])
    if b.run_id != latest.run_id:
        warnings.insert(
            0,
            f"{version_a} has no eval on the golden set of {version_b}'s latest run ({latest.golden_digest}, "
            f"{int(latest.metrics.get(m.ITEMS, 0))} items): compared on the latest set both have ({b.golden_digest}, "
            f"{int(b.metrics.get(m.ITEMS, 0))} items)",
        )
    records_a, records_b = store.records(a.run_id), store.records(b.run_id)
    if note := cutoff_note(rank_depth(a, records_a), rank_depth(b, records_b)):
        warnings.append(note)
    # The eval run tagged it (ragtrack.warning.example_golden): both sides ran on init's example set.
    warnings += sorted({c for c in b.cautions if c.startswith(EXAMPLE_CAUTION)})
    if a.substituted or b.substituted:
        warnings.append("substituted models in " + ", ".join(r.version for r in (a, b) if r.substituted))
    clustering = cluster or config.compare.cluster
    cluster_of = cluster_labels(records_b, clustering)
    rows, changes = compare_records(records_a, records_b, clusters=cluster_of)
    if any(r.partial for r in rows if r.scope == "all" and r.metric in JUDGES):
        warnings.append("some judge means cover fewer than all items (unanswered questions or judge errors): see n")
    shown = {(r.metric, r.scope) for r in rows}
    for scope in sorted({r.type for r in records_b}):  # a type none of whose items was judged had no row at all
        if missing := [j for j in JUDGES.names() if (j, "all") in shown and (j, scope) not in shown]:
            items = sum(r.type == scope for r in records_b)
            warnings.append(f"type {scope}: no item judged on both sides for {', '.join(missing)} (0 of {items})")
    paired = {r.id for r in records_a} & set(cluster_of)
    power = [power_of(r.metric, r.diff, delta) for r in rows if r.primary]
    ppi = None
    if labels is not None:
        matched_a, matched_b = match(labels, labelled_as[0], records_a), match(labels, labelled_as[1], records_b)
        judge = {r.metric: (r.diff.delta, r.diff.ci_low, r.diff.ci_high) for r in rows if r.scope == m.ALL}
        ppi = PPIReport(
            labels,
            (matched_a, matched_b),
            delta_figures(records_a, matched_a, records_b, matched_b, judge, clusters=cluster_of),
        )
        warnings += ppi.left_out
    clusters = describe(clustering, {i: cluster_of[i] for i in paired})
    report = ComparisonReport(a, b, rows, changes, "", warnings, clustering, clusters, power, ppi)
    if log:
        report.run_id = log_comparison(store, a, b, rows, changes, report.text(), warnings, ppi, (records_a, records_b))
    return report


@checked_arguments
def run_markdown(run_id: str, *, root: str | Path = ".", tracking_uri: str | None = None) -> str:
    """What a run's MLflow page shows (an eval against the champion, a comparison, a promotion
    decision), as Markdown for a reader outside the UI (a pull-request comment, a CI job summary):
    links point at the tracking server when there is one."""
    from ragtrack.tracking.descriptions import outside_ui

    store = open_store(load_config(root), tracking_uri, existing=True, writing=False)
    return outside_ui(store.description(run_id), store.ui_address)


@checked_arguments
def promote(
    version: str,
    *,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    margin: float = 0.0,
    tolerance: float | None = None,
    require_significance: bool = False,
    require_interval: bool = False,
    allow_substitutes: bool = False,
    allow_partial: bool = False,
    dry_run: bool = False,
    llm: str | None = None,
) -> Decision:
    """Apply the promotion rule to ``version``'s latest eval (of its spec as it is here; ``llm``: as
    ``eval --llm`` ran it); moves the ``champion`` alias on success. ``require_interval`` (or
    ``[promotion] require_interval``) asks the 95% intervals, not only the means, to clear the rule:
    correctness superiority and groundedness non-inferiority within ``tolerance`` (None: 0 for the mean
    rule, :data:`ragtrack.evaluation.promotion.NONINFERIORITY_TOLERANCE` with the interval gate)."""
    config = load_config(root)
    store = open_store(config, tracking_uri, existing=True)
    rule = Rule(
        margin,
        tolerance,
        require_significance,
        require_interval=require_interval or config.promotion.require_interval,
        cluster=config.compare.cluster,
        allow_substitutes=allow_substitutes,
        allow_partial=allow_partial,
        gates=dict(config.gates),
        guards=config.promotion.guard_rule,
    )
    spec = _known(store, config, version)
    model_version = _checked_out(store, version, spec, config, llm)
    return promote_in_store(
        store, version, rule, dry_run=dry_run, model_version=model_version, source=source_tags(config.root)
    )


#: ``compare champion vX``: the registry's champion, whatever its name.
CHAMPION = "champion"


class SameAsChampion(RagtrackError):
    """``compare champion vX`` where this checkout's vX is the champion: nothing to compare, and no failure."""


def _known(store: Store, config: ProjectConfig, version: str) -> Path:
    """``version``'s spec path; a name with neither a spec nor an eval is refused here, since
    "run: ragtrack eval --version v9" would only fail on the missing spec."""
    spec = resolve_spec_path(version, config.path(config.project.pipelines))
    if version not in BUILTIN_VERSIONS and not spec.is_file() and not store.eval_runs(version):
        evaluated = sorted({r.version for r in store.eval_runs()}, key=version_order)
        raise RagtrackError(
            f"no version {version!r}: no eval of it in the store and no spec {spec}; "
            f"evaluated: {', '.join(evaluated) or 'none yet'}"
        )
    return spec


def _checked_out(store: Store, version: str, spec: Path, config: ProjectConfig, llm: str | None = None) -> str | None:
    """The model version of ``version``'s spec as it is in this checkout (with ``llm`` as its LLM, as
    ``eval --llm`` ran it), so that ``promote`` judges this checkout's agent (two CI jobs of one name
    share a store; the newest eval may be the other job's). None when the spec is not a file here (a
    built-in, or one evaluated elsewhere)."""
    if not spec.is_file():
        return None
    loaded = with_llm(load_spec(version, config.path(config.project.pipelines), config.root), llm)
    found = store.model_versions(version, loaded.hash)
    if not found:
        run = f"ragtrack eval --version {version}" + (f" --llm {llm}" if llm else "")
        raise RagtrackError(
            f"{spec} (or a file it names: a prompt, the agent's code) has changed since {version} was last "
            f"evaluated (spec hash {loaded.hash} has no eval): run: {run}"
            + ("" if llm else " (an eval run with --llm is judged with the same --llm)")
        )
    return str(found[0].version)
