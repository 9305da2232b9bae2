"""The Markdown MLflow shows on a run, a model version, a registered model and a LoggedModel page.

Descriptions tell the story where a person looks in the stock UI: an eval run
says what it scored (overall and per question type), with which judge and
models, what the diagnosis is and how it stands against the champion (paired
differences with 95% intervals, and what ``ragtrack promote`` would decide);
a model version says why it is, or is not, the champion. Pure functions of
plain data: :mod:`ragtrack.tracking` writes them.

The UI shows the first lines of a description until "Show more" is clicked,
so each starts with its verdict. Its Markdown renderer draws tables without
padding, so table cells are spaced with no-break spaces. Links are the UI's
own routes (``#/runs/…``), so they work in ``ragtrack ui``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow, inputs_text
from ragtrack.evaluation.human_labels import PPIReport, logged_means
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.promotion import CRITERION, GUARD, Decision, Standing, figure_interval
from ragtrack.evaluation.stats import p_text
from ragtrack.records import RunSummary, substitutions

#: Metrics whose paired difference is shown per question type too (the rest: all items only).
PER_TYPE_DELTAS = (CRITERION, "context_recall")
PAIRED_NOTE = (
    "Δ over the items both runs answered; 95% t interval over clusters (items sharing GT documents by "
    'default; "no variation" where nothing varied: not evidence); sign-flip p; \\* the interval excludes 0 '
    "and the p, Holm-adjusted across every row, < 0.05."
)
_GAP = "\u00a0" * 3  # left of every cell but the first: the UI's tables have no padding


def run_link(run_id: str) -> str:
    """The UI's route to a run, whatever its experiment."""
    return f"#/runs/{run_id}"


def outside_ui(markdown: str, address: str | None) -> str:
    """A description for a reader outside the UI (a pull-request comment, a CI job summary): its
    routes become links to the tracking server at ``address``. A local store has no address; its
    routes stay as they are, valid in ``ragtrack ui``."""
    return markdown.replace("](#/", f"]({address.rstrip('/')}/#/") if address else markdown


@dataclass(frozen=True)
class Links:
    """Links to a run, a run's artifact, a trace and a version of the registered model, as routes of
    the MLflow UI (``experiment_id``: the eval experiment, where the traces are)."""

    registered_model: str
    experiment_id: str = ""

    def run(self, run_id: str) -> str:
        return run_link(run_id)

    def artifact(self, experiment_id: str, run_id: str, path: str) -> str:
        return f"#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}"

    def trace(self, trace_id: str) -> str:
        return f"#/experiments/{self.experiment_id}/traces/{trace_id}"

    def model_version(self, model_version: str) -> str:
        return f"#/models/{self.registered_model}/versions/{model_version}"


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table, first column left, the others right-aligned and spaced."""
    lines = [_row(header), "|:--|" + "--:|" * (len(header) - 1)]
    lines += [_row(cells) for cells in rows]
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join([cells[0], *(_GAP + c for c in cells[1:])]) + " |"


def _label(name: str) -> str:
    return f"{name} (1–5)" if name in JUDGES else name


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" if name in JUDGES else f"{value:.3f}"


def _scope(scope: str) -> str:
    return "all" if scope == m.ALL else f"type {scope}"


# ------------------------------------------------------------------ eval runs
def headline(run: RunSummary) -> str:
    """``**v5**: correctness 2.60, groundedness 5.00 (judges 1–5), context recall 0.627, MRR 0.697``."""
    metrics = run.metrics
    parts = [f"{_label(n)} {_value(n, metrics.get(n))}" for n in m.CORE]
    items = int(metrics.get(m.ITEMS, 0))
    judged = metrics.get(m.judge_count(CRITERION))
    # A mean over fewer items than the run holds says so here too (the first line a PR comment shows).
    fewer = f" ({int(judged)} judged)" if judged is not None and judged < items else ""
    return f"**{run.version}**: " + ", ".join(parts) + f" over {items} items{fewer}"


def scores(metrics: dict[str, float]) -> str:
    """Every registered metric overall and per question type, with the item count of each scope."""
    scopes = [m.ALL] + [t for t in m.TYPES if m.key(m.ITEMS, t) in metrics]
    header = ["metric"] + [f"{_scope(s)} ({int(metrics.get(m.key(m.ITEMS, s), 0))})" for s in scopes]
    names = [*m.HEADLINE, *(n for n in m.comparable_metrics() if n not in m.HEADLINE)]
    rows = []
    for name in names:
        if all(m.key(name, s) not in metrics for s in scopes):
            continue  # not defined for this golden set (all_hops_at_k without GT groups)
        cells = []
        for s in scopes:
            cell = _value(name, metrics.get(m.key(name, s)))
            count = m.judge_count(name) if name in JUDGES else m.RETRIEVAL_N if name in m.RETRIEVAL else None
            scored, total = metrics.get(m.key(count, s)) if count else None, metrics.get(m.key(m.ITEMS, s))
            if scored is not None and total and scored < total:
                cell += f" (n={int(scored)})"
            cells.append(f"**{cell}**" if s == m.ALL and name == CRITERION else cell)
        rows.append([_label(name), *cells])
    return table(header, rows)


def nodes(metrics: dict[str, float]) -> str:
    """The run's node metrics and failures by node (first failing node per item), from its metrics so
    that a re-description keeps them ("" for a run without node roles)."""
    from ragtrack.agent import FLOW
    from ragtrack.evaluation import nodes as n

    failing = {
        role: int(metrics[f"{n.NODE_PREFIX}first_failing/{role}"])
        for role in FLOW
        if f"{n.NODE_PREFIX}first_failing/{role}" in metrics
    }
    if not failing:
        return ""
    items = int(metrics.get(m.ITEMS, 0))
    rows = [[role, str(k), f"{k / items:.0%}" if items else "–"] for role, k in failing.items()]
    rows.append(["none", str(items - sum(failing.values())), ""])
    figures = [
        f"{label} {metrics[key]:.3f}"
        for key, label in (
            (n.INTENT_ACCURACY, "intent accuracy"),
            (n.REWRITE_RETENTION, "rewrite retention"),
            (n.GENERATION_GROUNDEDNESS, "generation groundedness"),
        )
        if key in metrics
    ]
    recall = sorted(k for k in metrics if k.startswith(f"{n.NODE_PREFIX}retrieval/") and k.endswith("/context_recall"))
    figures += [f"recall of {k.split('/')[2]} {metrics[k]:.3f}" for k in recall]
    head = "**Failures by node** (each item's first failing node, in flow order: " + " → ".join(FLOW) + ")"
    return "\n".join(
        [
            head,
            "",
            table(["node", "items", "share"], rows),
            *(["", "Node metrics: " + ", ".join(figures)] if figures else []),
        ]
    )


def paired(a: str, b: str, rows: Sequence[MetricRow]) -> str:
    """The paired comparison a → b: every headline metric overall, the criterion and recall per type too."""
    by_key = {(r.metric, r.scope): r for r in rows}
    out = []
    for name in m.HEADLINE:
        for scope in (m.ALL, *(m.TYPES if name in PER_TYPE_DELTAS else ())):
            r = by_key.get((name, scope))
            if r is None:
                continue
            d = r.diff
            delta = f"{d.delta:+.3f}" + (" \\*" if r.significant else "")
            out.append(
                [
                    _label(name) if scope == m.ALL else f"↳ {_scope(scope)}",
                    _value(name, d.mean_a),
                    _value(name, d.mean_b),
                    f"**{delta}**" if name == CRITERION and scope == m.ALL else delta,
                    d.interval_text(),
                    d.p_text,
                    f"{d.n}" if not r.partial else f"{d.n} of {r.items_total}",
                ]
            )
    return table(["metric", a, b, f"Δ {b} − {a}", "95% CI", "p", "items"], out)


def moved(changes: Sequence[ItemChange], limit: int = 8) -> str:
    """The items whose correctness moved most, for a reader to open their traces."""
    top = [c for c in changes if c.metric == CRITERION][:limit]
    return ", ".join(f"{c.id} ({c.a:g} → {c.b:g})" for c in top)


def regressions_line(table: dict[str, list], route: str, limit: int = 3) -> str:
    """One paragraph: where the regressions table is, how many item scores dropped, and the worst
    ``limit`` with links to both traces ("" when nothing moved). ``table``: from
    :func:`ragtrack.tracking.compare.regressions`; ``route``: the table's page."""
    if not table["Δ"]:
        return ""
    drops = [i for i, delta in enumerate(table["Δ"]) if delta < 0]
    gains = len(table["Δ"]) - len(drops)
    a, b = (name.removesuffix(" score") for name in list(table)[3:5])
    worst = []
    for i in drops[:limit]:
        links = [f"[{side} trace]({table[f'{side} trace'][i]})" for side in (a, b) if table[f"{side} trace"][i]]
        worst.append(
            f"{table['item'][i]} {table['metric'][i]} {table[f'{a} score'][i]:g} → {table[f'{b} score'][i]:g}"
            + (f" ({', '.join(links)})" if links else "")
        )
    return (
        f"**Regressions**: [{len(drops)} item scores dropped, {gains} rose]({route}) from {a} to {b}, both "
        "versions' scores and reasons side by side in `regressions.json`"
        + (f"; worst: {'; '.join(worst)}" if worst else "")
        + "."
    )


def verdict(d: Decision) -> str:
    """What ``ragtrack promote`` would decide, and why."""
    if d.already_champion:
        return f"{d.version} is the champion: `ragtrack promote {d.version}` has nothing to decide"
    verb = "would promote" if d.promoted else "would refuse"
    return f"`ragtrack promote {d.version}` {verb} it: " + "; ".join(d.reasons)


def gates(d: Decision) -> str:
    if not d.gates:
        return "none"
    return ", ".join(
        f"{g.metric} ≥ {g.minimum:g}: {'missing' if g.value is None else f'{g.value:.3f}'} "
        f"{'passed' if g.passed else 'FAILED'}"
        for g in d.gates
    )


def eval_run(
    run: RunSummary,
    params: dict[str, str],
    diagnosis: str,
    items: int,
    standing: Standing | None,
    links: Links,
    errors: Sequence[str] = (),
    regressions: str = "",
) -> str:
    """An eval run's description: verdict first, then identity, scores, the champion comparison (with
    ``regressions``, the :func:`regressions_line` of its table), errors (``report.error_lines``: the
    terminal's summary), diagnosis."""
    total = int(params.get("golden_items", items))
    lines = [headline(run) + "  ", _standing_line(run, standing, items, total), ""]
    described = params.get("spec.version.description") or ""
    lines.append(
        (f"{described} · " if described else "")
        + f"{total} golden items (digest `{run.golden_digest}`) · judge `{run.judge_identity}` · "
        f"model version [{run.model_version}]({links.model_version(run.model_version)})"
    )
    if params.get("judge_aligned", "no") != "no":
        lines.append(
            f"Judged by an **aligned judge** (`{params['judge_aligned']}`, `ragtrack judge align`): its prompts carry "
            "graded examples from the project's human labels, so its scores compare only with runs of the same "
            "aligned judge."
        )
    if run.cautions:
        lines += ["", "**Cautions** (the figures depend on them)", "", *(f"* {c}" for c in run.cautions)]
    if swaps := substitutions(params):
        lines += ["", "**Substituted models** (`promote` refuses such runs without `--allow-substitutes`): " + swaps]
    lines += ["", "**Scores** (judges 1–5, retrieval 0–1)", "", scores(run.metrics)]
    if figures := logged_means(run.metrics):  # from the metrics, so a re-description (a new champion) keeps it
        lines += ["", prediction_powered(figures, delta=False)]
    if standing is not None:
        d = standing.decision
        against = d.champion is not None and d.champion_model_version != run.model_version
        if against or items < total:  # else the first line said it already ("would promote" came twice)
            lines += ["", _standing(run, standing, links, regressions)]
        elif regressions:
            lines += ["", regressions]
    if section := nodes(run.metrics):
        lines += ["", section]
    if errors:
        lines += ["", "**Errors** (the figures above leave these items out where they say n)", ""]
        lines += [f"* {e}" for e in errors]
    lines += ["", "**Diagnosis** (retrieval first, then generation)", "", diagnosis]
    lines += [
        "",
        "Per item: the **Traces** tab (one trace per item: its stages and timings, the retrieved passages, "
        "each judge's score and reason); `items_table.json` and `per_type.png` under **Artifacts**.",
    ]
    return "\n".join(lines)


def _standing_line(run: RunSummary, s: Standing | None, items: int, total: int) -> str:
    """One line: how the run stands against the champion and what ``promote`` would do."""
    if items < total:
        return f"**Incomplete**: {items} of {total} items; run the same `ragtrack eval` again to resume this run."
    if s is None:
        return ""
    d = s.decision
    if d.champion is None:  # the rule's own reason starts "no champion yet" when it would promote
        return f"{verdict(d)}." if d.promoted else f"No champion yet: {verdict(d)}."
    if d.champion_model_version == run.model_version:
        return f"This model version is the champion ({d.champion})."
    paired_rows = {r.metric: r.diff for r in s.rows if r.scope == m.ALL}
    if CRITERION not in paired_rows:
        return f"Champion {d.champion}: {verdict(d)}."
    c = paired_rows[CRITERION]
    mv = f" (model version {d.champion_model_version})" if d.champion == run.version else ""  # same name
    return (
        f"Against champion **{d.champion}**{mv}: correctness Δ **{c.delta:+.3f}** "
        f"(95% CI {c.interval_text()}, p {c.p_text}) · {verdict(d)}."
    )


def _standing(run: RunSummary, s: Standing, links: Links, regressions: str = "") -> str:
    d = s.decision
    if d.champion is None or d.champion_model_version == run.model_version:
        return f"**Champion**: {_standing_line(run, s, 1, 1)}"
    mv = d.champion_model_version
    lines = [f"**Against the champion {d.champion}** (model version [{mv}]({links.model_version(mv)}))", ""]
    if s.champion is not None and s.rows:
        lines += [
            f"Champion's eval [{s.champion.run_id[:8]}]({links.run(s.champion.run_id)}). {PAIRED_NOTE}",
            "",
            paired(d.champion, run.version, s.rows),
        ]
        if regressions:
            lines += ["", regressions]
        elif moved_items := moved(s.changes):
            lines += ["", f"Items whose correctness moved most: {moved_items}."]
    lines += ["", f"{verdict(d)}.", "", f"Rule: {d.rule}; gates: {gates(d)}."]
    return "\n".join(lines)


def prediction_powered(figures: Sequence[tuple[str, float, float, float, float, int]], delta: bool) -> str:
    """One paragraph: per judged metric (name, judge-only figure, PPI estimate, interval, items labelled),
    the prediction-powered mean or Δ beside the judge's alone."""
    sign = "+" if delta else ""
    counts = {n for *_, n in figures}
    parts = [
        f"{name} **{est:{sign}.2f}** [{low:{sign}.2f}, {high:{sign}.2f}] (judge alone {judge:{sign}.2f}"
        + ("" if len(counts) == 1 else f", {n} labelled")
        + ")"
        for name, judge, est, low, high, n in figures
    ]
    labelled = f"{counts.pop()} human-labelled items" if len(counts) == 1 else "the human-labelled items"
    what = "Δ" if delta else "means"
    return (
        f"**Prediction-powered {what}** (95%; the judge corrected by its error on {labelled}, whose file is "
        "the run's `human_labels` dataset): " + " · ".join(parts) + "."
    )


def comparison(
    a: RunSummary,
    b: RunSummary,
    rows: Sequence[MetricRow],
    changes: Sequence[ItemChange],
    cautions: Sequence[str] = (),
    ppi: PPIReport | None = None,
    regressions: str = "",
) -> str:
    """A ``compare`` run's description: the paired table, the items that moved (``regressions``: the
    :func:`regressions_line` of its table), and what makes the two runs less comparable (``ragtrack
    compare`` prints the same cautions)."""
    lines = [
        f"**{a.version} → {b.version}** ({inputs_text(a, b)}): "
        f"eval runs [{a.run_id[:8]}]({run_link(a.run_id)}) and [{b.run_id[:8]}]({run_link(b.run_id)}). {PAIRED_NOTE}",
        "",
        paired(a.version, b.version, rows),
    ]
    if regressions:
        lines += ["", regressions]
    elif moved_items := moved(changes):
        lines += ["", f"Items whose correctness moved most: {moved_items}."]
    estimated = [f for f in ppi.figures if f.ppi is not None] if ppi is not None else []
    if estimated:
        figures = [(f.metric, f.judge, f.ppi.estimate, f.ppi.ci_low, f.ppi.ci_high, f.ppi.labelled) for f in estimated]
        lines += ["", prediction_powered(figures, delta=True)]
    if cautions:
        lines += ["", "**Cautions**", "", *(f"* {c}" for c in cautions)]
    return "\n".join(lines)


# ------------------------------------------------------------------ promotion
def decision(d: Decision, started_ms: int, links: Links) -> str:
    """One promotion decision in full: outcome, figures with the interval, rule, gates, reasons, runs."""
    challenged = d.champion and not d.already_champion
    against = f" over {d.champion} (model version {d.champion_model_version})" if challenged else ""
    dry = " (dry run: the alias did not move)" if d.dry_run else ""
    # The first line shows while the description is collapsed: an override is part of the verdict.
    waived = f" · **overrides**: {'; '.join(d.overrides)}" if d.overrides else ""
    lines = [f"**{d.version} {d.verb}**{against} on {when(started_ms)}{dry}{waived}", ""]
    f = d.figures
    if "correctness_delta" in f:
        lines.append(
            f"- correctness {f['challenger_correctness_paired']:.3f} vs {f['champion_correctness']:.3f}: "
            f"Δ {f['correctness_delta']:+.3f}, "
            f"95% CI {figure_interval(f, CRITERION)}, "
            f"p {p_text(f['correctness_p'])} over {int(f['paired_items'])} paired items"
        )
        lines.append(
            f"- {GUARD} {f['challenger_groundedness_paired']:.3f} vs {f['champion_groundedness']:.3f}: "
            f"Δ {f['groundedness_delta']:+.3f}"
        )
    lines += [
        f"- rule: {d.rule}",
        f"- gates: {gates(d)}",
        f"- {'why' if d.accepted else 'refused because'}: " + "; ".join(d.reasons),
        f"- decision run [{d.decision_run_id[:8]}]({links.run(d.decision_run_id)}) · "
        f"eval run [{d.run_id[:8]}]({links.run(d.run_id)})",
    ]
    return "\n".join(lines)


def decisions_experiment(view: str) -> str:
    """The decisions experiment's description: what its runs are and where outcomes and overrides show."""
    return (
        f"Every `ragtrack compare` and `ragtrack promote` as a run · [decisions with outcome and overrides]({view})"
        " · expand for how to read them\n\n"
        "A promotion run is named `promote <version>: <outcome>`, followed by the options that overrode "
        "the rule in parentheses (`--allow-substitutes`, `--allow-partial`, a `--margin` or `--tolerance`); its "
        "`overrides` param and its description say what each waived. A comparison run is named "
        "`compare <a> vs <b>`; its `regressions.json` artifact lists the items that got worse."
    )


def promotion_under_way(d: Decision, links: Links) -> str:
    """What heads every description a promotion is about to make stale (the registered model's, the
    experiment's, each involved model version's) while it moves the alias: true whether the alias has
    moved yet or not, and, should the promotion die there, it says how to finish it. Plain first line:
    the registry's tables show it as raw text."""
    before = f"{d.champion} (model version {d.champion_model_version})" if d.champion else "no champion"
    return (
        f"A promotion is being recorded: {d.version} (model version {d.model_version}) over {before}. "
        f"Until this note goes, the champion alias may name either; if it stays, that promotion was "
        f"interrupted and the next `ragtrack promote` (of any version) finishes it "
        f"([decision run {d.decision_run_id[:8]}]({links.run(d.decision_run_id)}))."
    )


def abandoned(why: str) -> str:
    """The description of a promotion run that never applied its decision."""
    return f"**Abandoned**: {why}. Nothing it decided was applied; `ragtrack promote` decides again."


@dataclass(frozen=True)
class PastDecision:
    """A recorded decision, as the decisions experiment keeps it."""

    run_id: str
    started_ms: int
    summary: str


def model_version(
    version: str,
    number: str,
    champion: tuple[str, str] | None,
    champion_since_ms: int | None,
    latest: str,
    history: Sequence[PastDecision],
    links: Links,
) -> str:
    """A model version's description: is it the champion (since when), the latest decision, the earlier ones."""
    lines = [model_version_head(version, number, champion, champion_since_ms), ""]
    if latest:
        lines += [latest, ""]
    if history:
        lines += ["**Decisions involving this version** (newest first)", ""]
        lines += [f"- {when(h.started_ms)}: {h.summary} ([run]({links.run(h.run_id)}))" for h in history]
    return "\n".join(lines)


def model_version_head(
    version: str, number: str, champion: tuple[str, str] | None, champion_since_ms: int | None = None
) -> str:
    """The first line of a model version's description: whether it is the champion, or which is."""
    # The versions table shows a description's first line as raw text: it carries no markup.
    if champion and champion[0] == number:
        since = f" since {when(champion_since_ms)}" if champion_since_ms is not None else ""
        return f"{version} is the champion{since}"
    if champion:
        return f"{version} is not the champion: {champion[1]} (model version {champion[0]}) is"
    return f"{version} is not the champion (there is none yet)"


def registered_model(name: str, champion: tuple[str, str] | None, since_ms: int | None, why: str, links: Links) -> str:
    """The registered model's description: which version is champion, since when, and why."""
    if champion is None:
        return "No champion yet: `ragtrack promote <version>` makes the first version that passes its gates champion."
    number, version = champion
    since = f" since {when(since_ms)}" if since_ms is not None else ""
    return "\n".join(
        [
            f"### Champion: {version} (model version [{number}]({links.model_version(number)})){since}",
            "",
            why,
            "",
            f'Answer with it: `mlflow.pyfunc.load_model("models:/{name}@champion").predict(["…"])`. '
            "Each version's description says why it is or is not the champion; every decision is a "
            "`promotion` run in the decisions experiment.",
        ]
    )


def logged_model(version: str, description: str, number: str, runs: Sequence[RunSummary], links: Links) -> str:
    """A LoggedModel's description: which agent version it is and the eval runs that measured it."""
    rows = [
        [
            f"[{r.run_id[:8]}]({links.run(r.run_id)})",
            when(r.started) if r.started else "",
            f"`{r.golden_digest[:8]}`",
            f"`{r.judge_identity.split('|')[0]}`",
            *(_value(n, r.metrics.get(n)) for n in m.CORE),
        ]
        for r in runs
    ]
    return "\n".join(
        [
            f"**{version}**" + (f" — {description}" if description else ""),
            "",
            f"Registered as model version [{number}]({links.model_version(number)}). "
            "Eval runs of this agent version (newest first):",
            "",
            table(["eval run", "started", "golden", "judge", *m.CORE], rows),
        ]
    )


def experiment(
    champion: tuple[str, str] | None,
    since_ms: int | None,
    runs: Sequence[RunSummary],
    view: str,
    links: Links,
) -> str:
    """The eval experiment's description: the champion, then every version's latest comparable eval."""
    if champion:
        number, version = champion
        since = f" since {when(since_ms)}" if since_ms is not None else ""
        head = (
            f"Champion: **{version}**{since} ([model version {number}]({links.model_version(number)}) says why) · "
            f"[all versions side by side]({view}) · expand for the leaderboard"
        )
    else:
        head = f"No champion yet · [all versions side by side]({view}) · expand for the leaderboard"
    rows = []
    for r in runs:
        mark = " ★" if champion and r.model_version == champion[0] else ""
        delta = "—"
        if champion and r.compared_to == champion[0] and m.comparison_key("delta", CRITERION) in r.metrics:
            f = {fig: r.metrics.get(m.comparison_key(fig, CRITERION)) for fig in m.COMPARISON_FIGURES}
            delta = f"{f['delta']:+.3f} [{f['delta_ci_low']:+.3f}, {f['delta_ci_high']:+.3f}]"
        rows.append(
            [
                f"**{r.version}**{mark}",
                f"[{r.model_version}]({links.model_version(r.model_version)})",
                *(_value(n, r.metrics.get(n)) for n in m.CORE),
                delta,
                f"[{r.run_id[:8]}]({links.run(r.run_id)})",
            ]
        )
    lines = [head, ""]
    if rows:
        reference = runs[0]
        lines += [
            table(["version", "model version", *m.CORE, "Δ correctness vs champion [95% CI]", "eval run"], rows),
            "",
            f"The latest eval of each version on golden set `{reference.golden_digest}` with judge "
            f"`{reference.judge_identity}`. Each eval run's description tells its story (scores per type, "
            "the paired comparison with the champion, the diagnosis); its **Traces** tab holds one trace per "
            "item with the retrieved passages and each judge's score and reason.",
        ]
    return "\n".join(lines)
