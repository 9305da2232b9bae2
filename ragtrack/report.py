"""Rendering results for people: the CLI's tables and the plain-text artifacts.

Every table the CLI prints is built here from the plain data the API returns,
so the commands stay thin and a script can print the same tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import inputs_text
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.promotion import figure_interval
from ragtrack.evaluation.stats import MIN_TESTABLE_UNITS, p_text

if TYPE_CHECKING:
    from ragtrack.agents.importer import ImportReport
    from ragtrack.api import AlignmentReport, CalibrationReport, ComparisonReport, EvalReport, PassageRow, VersionRow
    from ragtrack.api.monitoring import MonitorReport
    from ragtrack.api.triage import TriageReport
    from ragtrack.caches import Entry
    from ragtrack.evaluation.compare import ItemChange, MetricRow
    from ragtrack.evaluation.human_labels import PPIReport
    from ragtrack.evaluation.power import Power
    from ragtrack.evaluation.promotion import Decision
    from ragtrack.passage_search import Hit
    from ragtrack.production.pull import PullReport
    from ragtrack.records import ItemRecord, RunSummary


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def metrics_table(metrics: dict[str, float], title: str) -> Table:
    """Overall and per-type means; judge columns show their item count when not all were scored."""
    table = Table(title=title, title_justify="left", caption="judge scores are 1-5", caption_justify="left")
    table.add_column("metric", no_wrap=True)
    scopes = [m.ALL] + [t for t in m.TYPES if m.key(m.ITEMS, t) in metrics]
    for scope in scopes:
        n = metrics.get(m.key(m.ITEMS, scope))
        label = scope if scope == m.ALL else f"type {scope}"
        table.add_column(f"{label}\nn={int(n)}" if n is not None else label, justify="right")
    for name in m.RETRIEVAL:
        if m.RETRIEVAL.get(name).needs_groups and name not in metrics:
            continue  # no item of this run has GT groups
        table.add_row(name, *[_cell(metrics, name, m.RETRIEVAL_N, s, 3) for s in scopes])
    if m.key(m.UNMAPPED_SHARE) in metrics:
        table.add_row(m.UNMAPPED_SHARE, *[fmt(metrics.get(m.key(m.UNMAPPED_SHARE, s))) for s in scopes])
    for judge in JUDGES:
        table.add_row(judge, *[_cell(metrics, judge, m.judge_count(judge), s, 2) for s in scopes])
    for name in (n for n in m.CITATION if m.key(n) in metrics):  # the version's answers cite their contexts
        table.add_row(name, *[fmt(metrics.get(m.key(name, s))) for s in scopes])
    return table


def _cell(metrics: dict[str, float], name: str, count: str, scope: str, digits: int) -> str:
    """A mean, with ``(n=k/N)`` when it covers fewer than all items of its scope."""
    mean, n, total = (metrics.get(m.key(x, scope)) for x in (name, count, m.ITEMS))
    cell = fmt(mean, digits)
    if n is not None and total is not None and n < total:
        cell += f" [yellow](n={int(n)}/{int(total)})[/]"
    return cell


def eval_warnings(metrics: dict[str, float]) -> list[str]:
    """What a user must know before trusting an eval's retrieval figures (``ragtrack eval`` prints them)."""
    out = []
    items, reported = metrics.get(m.ITEMS, 0), metrics.get(m.RETRIEVAL_N)
    unanswered = metrics.get(m.UNANSWERED, 0)
    if unanswered:
        out.append(
            f"{int(unanswered)} of {int(items)} questions got no answer (see the errors): they are not judged, "
            "so the judge means cover the others; run the same command again to ask them again"
        )
    # An item without an answer reported no retrieval either (an external agent's failed call).
    if reported is not None and reported < items - unanswered:
        out.append(
            f"{int(items - unanswered - reported)} of {int(items)} replies did not say what was retrieved "
            f"(see the errors); the retrieval metrics cover the other {int(reported)}"
        )
    share = metrics.get(m.UNMAPPED_SHARE)
    if share is not None and share > m.UNMAPPED_WARNING:
        out.append(
            f"{share:.0%} of the retrieved contexts map to no corpus passage (above {m.UNMAPPED_WARNING:.0%}); "
            "they count as retrieved and non-relevant. Is --corpus what the agent indexed? "
            "(a Dify or RAGFlow knowledge base: ragtrack corpus import; your own code: return corpus passage IDs "
            "or their text; unmapped contexts are listed per item in items.jsonl)"
        )
    return out


def error_lines(records: list[ItemRecord], most: int = 5, ids: int = 4) -> list[str]:
    """The run's distinct errors, most frequent first, each with its item count and the first
    item IDs: eight items failing alike (a key, a wrong ``answer_path``) read as one line."""
    where: dict[str, list[str]] = {}
    for r in records:
        found = [*r.errors, *(f"judge {name}: {v.error}" for name, v in r.judges.items() if v.error)]
        for error in dict.fromkeys(found):
            where.setdefault(error, []).append(r.id)
    ranked = sorted(where.items(), key=lambda kv: -len(kv[1]))  # stable: first seen first among equals
    lines = []
    for error, items in ranked[:most]:
        shown = ", ".join(items[:ids]) + (", …" if len(items) > ids else "")
        text = error if len(error) <= 300 else error[:300] + "…"
        lines.append(f"{len(items)} item{'s' if len(items) > 1 else ''} ({shown}): {text}")
    if len(ranked) > most:
        lines.append(f"… and {len(ranked) - most} other errors (every item's in items.jsonl)")
    return lines


ACCOUNTING_COLUMNS = ("calls", "cached", "offline", "failed", "retries", "truncated")


def accounting_table(accounting: dict[str, dict[str, dict[str, float]]]) -> Table | None:
    """LLM work per step; None when everything ran offline (nothing to account for)."""
    rows = [(who, step, f) for who, steps in accounting.items() for step, f in steps.items() if step != "total"]
    if all(f["calls"] + f["cached"] == 0 for _, _, f in rows):
        return None
    table = Table(title="LLM steps", title_justify="left")
    for col in ("who", "step", *ACCOUNTING_COLUMNS, "tokens in/out", "cost $", "p50 s", "p95 s"):
        table.add_column(col, justify="left" if col in ("who", "step") else "right")
    for who, step, f in rows:
        table.add_row(
            who,
            step,
            *(str(int(f[k])) for k in ACCOUNTING_COLUMNS),
            f"{int(f['tokens_in'])}/{int(f['tokens_out'])}",
            f"{f['cost_usd']:.4f}",
            f"{f['latency_p50_s']:.2f}",
            f"{f['latency_p95_s']:.2f}",
        )
    return table


def comparison_table(report: ComparisonReport, wide: bool = False) -> Table:
    """The paired table; 120 columns at most unless ``wide`` (the raw p beside the Holm-adjusted one,
    the clusters and the standard error of each row)."""
    a, b = report.a.version, report.b.version
    untestable = any(not r.diff.testable for r in report.rows)
    sampled = any(r.diff.judge_samples > 1 for r in report.rows)
    table = Table(
        title=f"{a} vs {b}  ({inputs_text(report.a, report.b)})",
        title_justify="left",
        caption="Δ = b − a; 95% CI: t over clusters (CR2 SE, ≤ C − 1 df)"
        + (", judge samples averaged per item" if sampled else "")
        + f"; * the interval excludes 0 and the Holm-adjusted p (one family of {len(report.rows)} tests) < 0.05;"
        " ◆ the promotion rule's metrics (promote decides on its own one-sided tests)"
        + ("; rows with ≤ 5 clusters are never marked" if untestable else ""),
        caption_justify="left",
    )
    columns = ["metric", "scope", a, b, "Δ", "95% CI", "p Holm", "n"]
    if wide:
        columns[6:6] = ["p"]
        columns += ["clusters", "SE"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("metric", "scope") else "right", no_wrap=True)
    order = {name: i for i, name in enumerate(dict.fromkeys(r.metric for r in report.rows))}
    for row in sorted(report.rows, key=lambda r: (order[r.metric], r.scope != m.ALL, r.scope)):
        d = row.diff
        colour = ("green" if d.delta > 0 else "red") if row.significant else ""
        delta = f"[{colour}]{d.delta:+.2f}*[/]" if colour else f"{d.delta:+.2f}"
        n = f"{d.n}" if not row.partial else f"[yellow]{d.n}/{row.items_total}[/]"
        name = row.metric + (" ◆" if row.primary else "") if row.scope == m.ALL else ""
        ci = f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if d.varies else "[dim]no variation: not evidence[/]"
        cells = [name, row.scope, f"{d.mean_a:.3f}", f"{d.mean_b:.3f}", delta, ci, p_text(row.p_adjusted), n]
        if wide:
            cells[6:6] = [d.p_text]
            cells += [str(d.units), f"{d.se:.3f}"]
        table.add_row(*cells, end_section=row.scope == m.TYPES[-1])
    return table


def power_lines(power: list[Power], clusters: str = "") -> list[str]:
    """``clustered by …`` and the minimum detectable Δ of each primary metric (or why there is none), and
    the items a named Δ needs from new documents and from new items on these documents."""
    lines = [clusters] if clusters else []
    if not power:
        return lines
    parts = []
    for p in power:
        if p.mde is None:
            parts.append(f"{p.metric} none ({p.reason})")
            continue
        text = f"{p.metric} {p.mde:.2f}"
        if p.delta is not None:
            same = (
                f"~{p.items_same_documents} on these documents"
                if p.items_same_documents is not None
                else "unreachable on these documents"
            )
            text += f" (Δ {p.delta:g} needs ~{p.items_new_documents} items on new documents, {same})"
        parts.append(text)
    lines.append(
        f"minimum detectable Δ at 80% power (t, α 0.05, this set's {power[0].n} items in {power[0].clusters} "
        "clusters): " + ", ".join(parts)
    )
    return lines


def ppi_lines(ppi: PPIReport | None, delta: bool = False) -> list[str]:
    """Each judged metric's judge-only figure (95% interval) beside the prediction-powered one from the
    human labels, or why there is none: ``delta`` for a comparison (b − a, labelled on both sides)."""
    if ppi is None:
        return []
    versions = [matched.version for matched in ppi.matched]
    if not ppi.used:
        labelled = ", ".join(f"{v} {n}" for v, n in ppi.file.versions().items()) or "none"
        return [
            f"prediction-powered figures: {ppi.file.path} labels no answer of {' or '.join(versions)} "
            f"that its run recorded (labelled answers: {labelled})"
        ]
    sign = "+" if delta else ""
    if delta:
        a, b = ppi.matched
        head = (
            f"prediction-powered Δ {b.version} − {a.version}, 95% (the judge corrected by its error on the items "
            f"whose answers are labelled on both sides; {ppi.file.path}):"
        )
    else:
        (one,) = ppi.matched
        head = (
            f"prediction-powered means, 95% (the judge corrected by its error on {len(one.labels)} human labels "
            f"of {one.version}'s answers; {ppi.file.path}):"
        )
    lines = [head]
    for f in ppi.figures:
        spread = (
            f"[{f.judge_low:{sign}.3f}, {f.judge_high:{sign}.3f}]" if f.judge_high > f.judge_low else "(no variation)"
        )
        judge = f"judge {f.judge:{sign}.3f} {spread}"
        if f.ppi is None:
            lines.append(f"  {f.metric:<13} {judge}   PPI — ({f.reason})")
            continue
        e = f.ppi
        interval = f"[{e.ci_low:{sign}.3f}, {e.ci_high:{sign}.3f}]" if e.se > 0 else "(no variation: not evidence)"
        lines.append(
            f"  {f.metric:<13} {judge}   PPI {e.estimate:{sign}.3f} {interval}"
            f"   {e.labelled} labelled of {f.items}, judge weight λ {e.lam:.2f}"
        )
    return lines


def judge_spread_lines(report: ComparisonReport) -> list[str]:
    """The judges' own noise, where items were judged several times: mean within-item SD of Δ."""
    rows = [r for r in report.rows if r.scope == m.ALL and r.diff.within_sd is not None]
    if not rows:
        return []
    spread = ", ".join(f"{r.metric} {r.diff.within_sd:.2f}" for r in rows)
    return [f"judge noise (mean within-item SD of Δ over {rows[0].diff.judge_samples} samples): {spread}"]


def moved_items_table(report: ComparisonReport, limit: int) -> Table | None:
    moved = [c for c in report.changes if c.metric == "correctness"][:limit]
    if not moved:
        return None
    table = Table(title="items that moved (correctness)", title_justify="left")
    for col in ("item", "type", report.a.version, report.b.version, "question"):
        table.add_column(col)
    for c in moved:
        colour = "green" if c.delta > 0 else "red"
        table.add_row(escape(c.id), c.type, f"{c.a:g}", f"[{colour}]{c.b:g}[/]", escape(c.question))
    return table


def comparison_text(
    a: RunSummary,
    b: RunSummary,
    rows: list[MetricRow],
    changes: list[ItemChange],
    clusters: str = "",
    power: list[Power] | None = None,
    ppi: PPIReport | None = None,
) -> str:
    """Plain-text comparison (logged as ``comparison.md``)."""
    lines = [f"{a.version} ({a.run_id}) vs {b.version} ({b.run_id})", ""]
    lines.append(
        f"{'metric':<20}{'scope':<8}{a.version:>8}{b.version:>8}{'delta':>9}  95% CI            p      p Holm  n"
    )
    for r in rows:
        d = r.diff
        adjusted = p_text(r.p_adjusted)
        lines.append(
            f"{r.metric:<20}{r.scope:<8}{d.mean_a:>8.3f}{d.mean_b:>8.3f}{d.delta:>+9.3f}"
            f"  {d.interval_text():<16}  {d.p_text:>6}  {adjusted:>7} {d.n}/{r.items_total}"
            + ("  *" if r.significant else "")
        )
    lines += ["", *power_lines(power or [], clusters)]
    if ppi is not None:
        lines += ["", *ppi_lines(ppi, delta=True)]
    lines += ["", "items that moved (correctness):"]
    lines += [f"  {c.id} ({c.type}) {c.a:g} → {c.b:g}  {c.question}" for c in changes if c.metric == "correctness"]
    return "\n".join(lines)


def decision_lines(d: Decision) -> list[str]:
    """The rule, the paired figures, each gate and the verdict, as printed by ``ragtrack promote``."""
    lines = [f"[yellow]note:[/] {escape(note)}" for note in d.notes] + [f"rule: {d.rule}"]
    f = d.figures
    if f.get("champion_correctness") is not None:
        for name, width in (("correctness", "  "), ("groundedness", " ")):
            lines.append(
                f"{name}{width}{d.champion}: {f[f'champion_{name}']:.3f}   {d.version}: "
                f"{f[f'challenger_{name}_paired']:.3f}   Δ {f[f'{name}_delta']:+.3f} " + figure_interval(f, name)
            )
        lines += power_of_decision(f)
    for gate in d.gates:
        mark = "[green]pass[/]" if gate.passed else "[red]fail[/]"
        lines.append(f"gate {gate.metric} >= {gate.minimum:g}: {fmt(gate.value)} {mark}")
    colour = "green" if d.accepted else "red"
    lines.append(f"[bold {colour}]{escape(d.summary())}[/]")  # "[overrides: …]" is not markup
    lines += [f"[yellow]warning: {escape(w)}[/]" for w in d.warnings]
    lines.append(f"decision recorded in run {d.decision_run_id}")
    return lines


def power_of_decision(f: dict[str, float]) -> list[str]:
    """What the design could show: correctness's minimum detectable Δ (or why none) and the chance to show
    groundedness non-inferior were it truly unchanged."""
    if "clusters" not in f:
        return []
    design = f"{int(f['paired_items'])} items, {int(f['clusters'])} clusters, the largest {int(f['largest_cluster'])}"
    parts = []
    if "correctness_mde" in f:
        parts.append(f"correctness Δ {f['correctness_mde']:.3f} detected with 80%")
    elif f["clusters"] < MIN_TESTABLE_UNITS:
        parts.append(f"no test at 5% with {int(f['clusters'])} clusters (needs {MIN_TESTABLE_UNITS})")
    else:
        parts.append("correctness: no variation, no minimum detectable Δ")
    if "groundedness_power" in f:
        parts.append(
            f"groundedness shown within -{f['groundedness_tolerance']:g} with {f['groundedness_power']:.0%} "
            "if truly unchanged"
        )
    return [f"power of this design ({design}): " + "; ".join(parts)]


def versions_table(rows: list[VersionRow]) -> Table:
    """Versions, their last eval per golden set and the champion; fits 80 columns without cutting a
    marker: IDs are shortened to 7 characters, only the judge column wraps, and the markers (★ champion,
    * substituted models) sit in the cells that never shrink."""
    table = Table(title_justify="left", box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold underline")
    for col in ("version", "model", "spec", "golden", "run", "recall", "mrr", "correct", "ground"):
        table.add_column(
            col, no_wrap=True, justify="right" if col in ("recall", "mrr", "correct", "ground") else "left"
        )
    table.add_column("judge", overflow="fold", min_width=8)
    for row in rows:
        label = f"{escape(row.version)} [bold green]★[/]" if row.champion else escape(row.version)
        if not row.last_evals:
            table.add_row(label, row.model_version, row.spec_hash[:7], "—", "no eval", "", "", "", "", "—")
        for n, run in enumerate(row.last_evals):
            metrics = run.metrics
            table.add_row(
                label if n == 0 else "",
                row.model_version if n == 0 else "",
                row.spec_hash[:7] if n == 0 else "",
                run.golden_digest[:7],
                run.run_id[:7] + "".join(mark for mark, on in _run_marks(run) if on),
                fmt(metrics.get("context_recall")),
                fmt(metrics.get("mrr")),
                fmt(metrics.get("correctness"), 2),
                fmt(metrics.get("groundedness"), 2),
                run.judge_identity.split("|")[0],
            )
    return table


def _run_marks(run: RunSummary) -> list[tuple[str, bool]]:
    """The markers after a run's ID in ``versions`` (its legend explains them): * substituted models,
    ~ a mean shown covers fewer items than the run holds, ! the run has cautions (a --limit cut,
    --allow-stale items, an agent warning)."""
    items = run.metrics.get(m.ITEMS, 0)
    counts = (m.RETRIEVAL_N, m.judge_count("correctness"), m.judge_count("groundedness"))
    return [
        ("[bold yellow]*[/]", run.substituted),
        ("[yellow]~[/]", any(run.metrics.get(k, items) < items for k in counts)),
        ("[yellow]![/]", bool(run.cautions)),
    ]


def calibration_table(report: CalibrationReport) -> Table:
    table = Table(
        title=f"judge {report.judge} vs human labels",
        title_justify="left",
        caption="exact / within-one: share of scored cases; n: scored of labelled; "
        "spearman —: undefined, one side constant",
        caption_justify="left",
    )
    for col in ("judge", "scope", "n", "exact", "within 1", "spearman"):
        table.add_column(col, justify="left" if col in ("judge", "scope") else "right")
    for scope, agreements in report.agreements.items():
        for a in agreements:
            n = f"{a.n}" if not a.errors else f"[yellow]{a.n}/{a.n + a.errors}[/]"
            table.add_row(a.judge, scope, n, f"{a.exact:.2f}", f"{a.within_one:.2f}", fmt(a.spearman, 2))
    return table


def alignment_table(report: AlignmentReport) -> Table:
    """``judge align``: each judge's held-out agreement, plain prompt → with the examples."""
    table = Table(
        title=f"judge {report.judge}: held-out agreement with human labels, plain → aligned",
        title_justify="left",
        caption="held out: cases not shown as examples; spearman —: undefined (one side constant)",
        caption_justify="left",
    )
    for col in ("judge", "examples", "held out", "exact", "within 1", "spearman", "errors", "verdict"):
        table.add_column(col, justify="left" if col in ("judge", "examples", "verdict") else "right")
    for r in report.judges:
        shown = " ".join(i for ids in r.examples.values() for i in ids) or "—"
        if not r.examples:
            table.add_row(r.judge, shown, str(len(r.held_out)), "", "", "", "", r.status)
            continue
        b, a = r.before, r.after
        table.add_row(
            r.judge,
            shown,
            str(len(r.held_out)),
            f"{b.exact:.2f} → {a.exact:.2f}",
            f"{b.within_one:.2f} → {a.within_one:.2f}",
            f"{fmt(b.spearman, 2)} → {fmt(a.spearman, 2)}",
            f"{b.errors} → {a.errors}",
            f"[green]{r.status}[/]" if r.kept else r.status,
        )
    return table


def alignment_lines(report: AlignmentReport) -> list[str]:
    """What was saved (and how to use it), or that nothing was."""
    run = f"run [bold]{report.run_id}[/] · plain judge {report.judge_identity}"
    if report.saved is None:
        return [
            "held-out agreement improved for no judge: nothing saved (the plain judge stays what evals use)",
            run,
        ]
    rest = "; the others keep the plain prompt" if len(report.saved.judges) < len(report.judges) else ""
    return [
        f"saved {report.saved.path} · aligned judge digest {report.saved.digest} "
        f"({', '.join(report.saved.judges)}{rest})",
        f"use it: ragtrack eval --version <v> --judge {report.judge} --aligned-judge "
        "(or \\[eval] judge_aligned = true)",
        run,
    ]


def score_spread_lines(report: CalibrationReport) -> list[str]:
    """What each judge said, level by level: a judge that always says 5 can look fine on agreement alone."""
    lines = []
    for name, scores in report.predictions.items():
        given = [s for s in scores if s is not None]
        spread = "  ".join(f"{level}:{given.count(level)}" for level in range(1, 6))
        lines.append(f"  {name:<13} scores given  {spread}")
    return lines


def stats_table(stats: dict) -> Table:
    table = Table(show_header=False)
    for key, value in stats.items():
        if isinstance(value, dict):
            text = ", ".join(f"{k}: {v}" for k, v in value.items())
        else:
            text = f"{value:.2f}" if isinstance(value, float) else str(value)
        table.add_row(escape(key), escape(text))
    return table


def passages_table(rows: list[PassageRow]) -> Table:
    """``corpus ls``: the IDs a golden item's ``gt_context_ids`` may name."""
    table = Table(title=f"{len(rows)} passages", title_justify="left")
    table.add_column("id", overflow="fold")
    table.add_column("heading path", overflow="fold")
    table.add_column("chars", justify="right")
    for r in rows:
        table.add_row(escape(r.id), escape(r.title), str(r.chars))
    return table


def hits_table(hits: list[Hit], query: str, mode: str) -> Table:
    """``corpus search``: best passages first, each with the sentence that matched."""
    table = Table(title=f"{mode} search: {escape(query)}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("id", overflow="fold")
    table.add_column("score", justify="right")
    table.add_column("best sentence", overflow="fold")
    for h in hits:
        table.add_row(str(h.rank), escape(h.passage_id), f"{h.score:.4f}", escape(h.snippet))
    return table


def import_lines(r: ImportReport, shown: int = 10) -> list[str]:
    """What ``ragtrack corpus import`` did, and what changed since the last import."""
    lines = [
        f"imported {r.passages} passages from {r.documents} documents → {r.corpus_path}",
        f"ID table (platform segment → passage): {r.id_table_path}",
    ]
    if r.first_import:
        lines.append(f"write the golden set against these passage IDs; evaluate with --corpus {r.corpus_path}")
        return lines
    lines.append(f"since the last import: {len(r.added)} added, {len(r.removed)} removed, {len(r.changed)} changed")
    for label, ids in (("added", r.added), ("removed", r.removed), ("changed", r.changed)):
        if ids:
            more = f" … and {len(ids) - shown} more" if len(ids) > shown else ""
            lines.append(f"  {label}: {', '.join(ids[:shown])}{more}")
    if r.removed or r.changed:
        lines.append(
            "check the golden items whose GT names a removed or changed passage: `ragtrack golden validate` "
            "flags removed ones, and changed ones only for items with a gt_fingerprint (once checked, "
            "`ragtrack golden fingerprint` records one, so the next import's changes are flagged)"
        )
    return lines


def size(n_bytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n_bytes < 1024 or unit == "GB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    raise AssertionError  # unreachable: the loop returns at GB


def cache_table(entries: list[Entry]) -> Table:
    """Cache entries summed per kind: count, size, and the oldest and latest use."""
    from datetime import datetime

    from ragtrack.caches import CACHE_KINDS

    table = Table(title="cache", title_justify="left")
    for name, justify in [("kind", "left"), ("entries", "right"), ("size", "right")]:
        table.add_column(name, justify=justify)
    table.add_column("used: oldest … latest", no_wrap=True)
    table.add_column("holds")
    day = "%Y-%m-%d %H:%M"
    for name in CACHE_KINDS.names():
        own = [e for e in entries if e.kind == name]
        if own:
            used = (
                f"{datetime.fromtimestamp(own[0].last_used):{day}} … {datetime.fromtimestamp(own[-1].last_used):{day}}"
            )
            total = size(sum(e.bytes for e in own))
            table.add_row(name, str(len(own)), total, used, CACHE_KINDS.get(name).description)
    return table


# ------------------------------------------------------------------ --json (for scripts)
def eval_json(report: EvalReport, exit_status: int) -> dict:
    """What a CI script reads of an eval: identity, completeness, figures, errors and the exit status."""
    return {
        "command": "eval",
        "version": report.version,
        "run_id": report.run_id,
        "model_version": report.model_version,
        "complete": report.complete,
        "stopped_early": report.stopped_early,
        "items": len(report.records),
        "unanswered": sum(not r.answered for r in report.records),
        "metrics": report.metrics,
        "cautions": report.cautions(),
        "errors": report.error_summary(),
        "ppi": report.ppi.to_json() if report.ppi else None,
        "exit_status": exit_status,
    }


def comparison_json(report: ComparisonReport) -> dict:
    """Every paired row (b − a), the warnings and both runs."""

    def side(run: RunSummary) -> dict:
        return {"version": run.version, "run_id": run.run_id, "model_version": run.model_version}

    return {
        "command": "compare",
        "a": side(report.a),
        "b": side(report.b),
        "run_id": report.run_id,
        "rows": [
            {
                "metric": r.metric,
                "scope": r.scope,
                "a": r.diff.mean_a,
                "b": r.diff.mean_b,
                "delta": r.diff.delta,
                "ci_low": r.diff.ci_low if r.diff.varies else None,
                "ci_high": r.diff.ci_high if r.diff.varies else None,
                "no_variation": r.diff.no_variation or None,
                "p": r.diff.p_value,
                "p_holm": r.p_adjusted,
                "primary": r.primary,
                "significant": r.significant,
                "n": r.diff.n,
                "items": r.items_total,
                "clusters": r.diff.units,
                "largest_cluster": r.diff.largest,
                "se": r.diff.se,
                "judge_samples": r.diff.judge_samples,
                "judge_within_sd": r.diff.within_sd,
            }
            for r in report.rows
        ],
        "clustering": {"by": report.clustering, "text": report.clusters},
        "power": [
            {"metric": p.metric, "items": p.n, "clusters": p.clusters, "se": p.se, "mde": p.mde, "reason": p.reason}
            | {
                "delta": p.delta,
                "items_needed_new_documents": p.items_new_documents,
                "items_needed_same_documents": p.items_same_documents,
            }
            for p in report.power
        ],
        "ppi": report.ppi.to_json() if report.ppi else None,
        "warnings": report.warnings,
    }


def decision_json(d: Decision) -> dict:
    """The decision, its reasons, figures and gates, and the exit status ``promote`` ends with."""
    return {
        "command": "promote",
        "version": d.version,
        "model_version": d.model_version,
        "run_id": d.run_id,
        "outcome": d.outcome,
        "accepted": d.accepted,
        "dry_run": d.dry_run,
        "champion": d.champion,
        "champion_model_version": d.champion_model_version,
        "champion_run_id": d.champion_run_id,
        "rule": d.rule,
        "reasons": d.reasons,
        "figures": d.figures,
        "gates": [{"metric": g.metric, "minimum": g.minimum, "value": g.value, "passed": g.passed} for g in d.gates],
        "warnings": d.warnings,
        "decision_run_id": d.decision_run_id,
        "notes": d.notes,
        "exit_status": 0 if d.accepted else 1,
    }


# ------------------------------------------------------------------ production logs
#: What a pull through Dify's service API must say beside its counts (see ragtrack.production.sources.dify).
PARTIAL_COVERAGE = (
    "these are only the conversations of end users who left feedback (all Dify's service API can read): "
    "a dislike share over them is not the app's dislike rate; pull the app's traces (--from mlflow, Dify's "
    "MLflow tracing) for its whole traffic"
)


def pull_lines(r: PullReport) -> list[str]:
    """What ``ragtrack logs pull`` did: pulled, new, re-rated, unresolved with reasons, what is stored."""
    apps = ", ".join(r.apps) if r.apps else r.app
    feedbacks = f" and {r.feedbacks} feedbacks" if r.feedbacks else ""
    lines = [
        f"pulled {r.pulled} messages{feedbacks} from {r.source} ({r.app}){' from its cursor' if r.resumed else ''}: "
        f"{r.new} new messages, {r.updated} re-rated → experiment {r.experiment}",
        f"stored for {apps}: {r.stored} messages, {r.disliked} disliked, {r.liked} liked, "
        f"{r.stored - r.disliked - r.liked} unrated",
    ]
    if r.unresolved:
        total = sum(r.unresolved.values())
        lines.append(f"unresolved: {total}")
        lines += [f"  {n} {reason}" for reason, n in r.unresolved.most_common()]
    if r.coverage == "rated_conversations":
        lines.append(f"note: {PARTIAL_COVERAGE}")
    return lines


def pull_json(r: PullReport) -> dict:
    return {
        "command": "logs pull",
        "source": r.source,
        "app": r.app,
        "apps": r.apps,
        "experiment": r.experiment,
        "coverage": r.coverage,
        "resumed": r.resumed,
        "pulled": r.pulled,
        "feedbacks": r.feedbacks,
        "new": r.new,
        "updated": r.updated,
        "unresolved": dict(r.unresolved.most_common()),
        "stored": {"messages": r.stored, "disliked": r.disliked, "liked": r.liked},
        "cursor": str(r.cursor_path),
        "exit_status": 0,
    }


def triage_table(report: TriageReport, limit: int) -> Table:
    """The bad-case clusters, most evidence first: how many messages and users, why, and coverage."""
    t = report.triage
    table = Table(
        title=f"Bad cases: {len(t.clusters)} of {t.all_clusters} question clusters ({t.messages} messages)",
        title_justify="left",
    )
    for name, justify in (("#", "right"), ("msgs", "right"), ("users", "right"), ("dislikes", "right")):
        table.add_column(name, justify=justify)
    table.add_column("evidence")
    table.add_column("golden")
    table.add_column("question (representative)")
    for n, c in enumerate(t.clusters[:limit], start=1):
        golden = f"covered by {c.covered_by}" if c.covered_by else "—"
        table.add_row(
            str(n), str(c.messages), str(c.users), str(c.dislikes), escape(c.why()), escape(golden), escape(c.question)
        )
    return table


def triage_lines(report: TriageReport) -> list[str]:
    """What triage compared and judged, under its table."""
    t, j = report.triage, report.judging
    covered = sum(1 for c in t.clusters if c.covered_by)
    which = f"without a dislike ({report.sample_rate:g} of them)"
    if t.disliked_runs:
        which = f"({report.sample_rate:g} of those without a dislike, and every disliked workflow run)"
    lines = [
        f"{t.questions} distinct questions in {t.all_clusters} clusters, compared by {t.space}",
        f"judged {t.judged} message(s) {which} by {j.label}" + (f"; {j.failed} verdict(s) failed" if j.failed else ""),
    ]
    if t.disliked_runs:
        named = ", ".join(f"{node} {n}" for node, n in t.failing_nodes.items()) or "none"
        unseen = t.disliked_runs - sum(t.failing_nodes.values())
        lines.append(
            f"disliked workflow runs by first failing node: {named}"
            + (f"; {unseen} of {t.disliked_runs} with no failing node seen" if unseen else "")
        )
    if covered:
        lines.append(f"{covered} cluster(s) covered by a golden item: `golden propose --from-logs` leaves them out")
    if j.stopped:
        lines.append(f"judging stopped early: {j.stopped}")
    return lines


def _estimate(e) -> str:
    return "—" if e is None else f"{e.value:.3f} [{e.low:.2f}, {e.high:.2f}]"


def monitor_table(report: MonitorReport) -> Table:
    """One row per app version and day: the rates with their 95 % intervals, and what changed."""
    table = Table(title=f"Monitor ({report.experiment})", title_justify="left")
    for name in ("app", "day", "msgs", "dislike rate", "groundedness", "relevance", "no retrieval", "run", "alarm"):
        table.add_column(name, justify="right" if name == "msgs" else "left")
    for r in report.results:
        w, rates = r.window, r.window.rates
        alarm = ", ".join(d.metric for d in r.comparison.drops) if r.comparison.drops else "—"
        status = r.status + (" (partial)" if w.partial else "")
        table.add_row(
            escape(w.app),
            w.day,
            str(w.messages),
            _estimate(rates.get("dislike_rate")),
            _estimate(rates.get("groundedness")),
            _estimate(rates.get("relevance")),
            _estimate(rates.get("no_retrieval_rate")),
            status,
            alarm,
        )
    return table


def monitor_lines(report: MonitorReport) -> list[str]:
    """The alarms in words, what was judged, a workflow's node figures, and the partial-coverage caveat."""
    from ragtrack.production.monitor import node_summary

    lines = []
    if report.judging is not None:
        j = report.judging
        lines.append(
            f"judged {len(j.verdicts)} message(s) by {j.label} at sample rate {report.sample_rate:g}"
            + (f"; {j.failed} verdict(s) failed" if j.failed else "")
        )
    if any(r.window.partial for r in report.results):
        lines.append(f"partial: {PARTIAL_COVERAGE}")
    for r in report.results:  # a workflow app's nodes, window by window
        lines += [f"{r.window.app} {r.window.day} {line}" for line in node_summary(r.window, r.comparison)]
    lines += [f"ALARM {d}" for d in report.alarms]
    if report.dry_run:
        lines.append("dry run: nothing judged or logged")
    return lines


def monitor_json(report: MonitorReport, exit_status: int) -> dict:
    return {
        "command": "monitor",
        "experiment": report.experiment,
        "sample_rate": report.sample_rate,
        "windows": [
            {
                "app": r.window.app,
                "day": r.window.day,
                "status": r.status,
                "run_id": r.run_id,
                "coverage": sorted(r.window.coverage),
                "metrics": r.window.metrics() | r.comparison.metrics(),
                "compared_with": r.comparison.previous_day,
                "not_compared": r.comparison.skipped or None,
                "drops": [
                    {"metric": d.metric, "previous": d.previous, "current": d.current, "threshold": d.threshold}
                    for d in r.comparison.drops
                ],
            }
            for r in report.results
        ],
        "alarms": [str(d) for d in report.alarms],
        "notes": report.notes,
        "exit_status": exit_status,
    }


def node_lines(records, metrics: dict[str, float]) -> list[str]:
    """The eval's node-by-node view: each role's nodes (and why), intent accuracy with its confusion
    table, rewrite retention, recall per retrieval node and for their union, generation groundedness,
    failures by node and each failing item's first failing node. Empty when no node has a role."""
    from ragtrack.agent import FLOW
    from ragtrack.evaluation import nodes as n

    roles: dict[str, dict[str, str]] = {}
    for r in records:
        for s in r.stages:
            if role := s.node.get("role"):
                roles.setdefault(role, {}).setdefault(s.name, s.node.get("role_from", ""))
    if not roles:
        return []
    out = ["Nodes (role: node — how the role was found)"]
    for role in [*FLOW, *sorted(set(roles) - set(FLOW))]:
        if role in roles:
            out.append(f"  {role}: " + "; ".join(f"{t} — {why}" for t, why in roles[role].items()))
    if n.INTENT_ACCURACY in metrics:
        count = int(metrics["node/counts/intent"])
        out.append(f"intent accuracy {metrics[n.INTENT_ACCURACY]:.3f} (n={count})")
        table = n.confusion(records)
        chosen = sorted({c for row in table.values() for c in row})
        width = max(len(x) for x in [*table, *chosen, "expected \\ chosen"])
        out.append("  " + "expected \\ chosen".ljust(width) + "".join(f"  {c:>{max(len(c), 3)}}" for c in chosen))
        for expected, row in table.items():
            cells = "".join(f"  {row.get(c, 0):>{max(len(c), 3)}}" for c in chosen)
            out.append("  " + expected.ljust(width) + cells)
    if n.REWRITE_RETENTION in metrics:
        out.append(
            f"rewrite retention of must_keep terms {metrics[n.REWRITE_RETENTION]:.3f} "
            f"(n={int(metrics['node/counts/rewrite'])})"
        )
    if n.REWRITE_FIDELITY in metrics:
        out.append(
            f"rewrite fidelity (judged, items without must_keep) {metrics[n.REWRITE_FIDELITY]:.3f} (0-1, "
            f"n={int(metrics['node/counts/rewrite_fidelity'])})"
        )
    prefix = "node/retrieval/"
    titles = {n.metric_name(s.name): s.name for r in records for s in r.stages}  # metric names → the titles
    for key in sorted(k for k in metrics if k.startswith(prefix) and k.endswith("/context_recall")):
        node = key[len(prefix) : -len("/context_recall")]
        hit = metrics.get(f"{prefix}{node}/hit_rate")
        extra = (
            f", empty {metrics[f'{prefix}{node}/empty_rate']:.3f}" if f"{prefix}{node}/empty_rate" in metrics else ""
        )
        label = "all retrieval nodes (union)" if node == n.UNION else f"retrieval node {titles.get(node, node)}"
        items = f" (n={int(metrics[f'{prefix}{node}/items'])})" if f"{prefix}{node}/items" in metrics else ""
        out.append(f"{label}: recall {metrics[key]:.3f}, hit rate {fmt(hit)}{extra}{items}")
    if n.GENERATION_GROUNDEDNESS in metrics:
        out.append(f"generation groundedness {metrics[n.GENERATION_GROUNDEDNESS]:.3f} (0-1)")
    failures = n.failures_by_node(records)
    total = len(records)
    out.append(
        "failures by node (first failing node per item, in flow order): "
        + (", ".join(f"{role} {k}/{total}" for role, k in failures.items()) or f"none of {total}")
    )
    for r in records:
        if r.first_failing:
            out.append(f"  {r.id}: {r.first_failing}")
    return out
