"""The ``ragtrack`` command line: a thin shell over :mod:`ragtrack.api`."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ragtrack.errors import RagtrackError

console = Console(stderr=False)
err = Console(stderr=True)

JUDGE_HELP = "offline (heuristic judges), openai:<model>, local:<path|smollm2> or a profile from ragtrack.toml."


def _quiet_libraries() -> None:
    """MLflow, transformers and friends are chatty; ragtrack prints what matters."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("mlflow", "alembic", "transformers", "sentence_transformers", "httpx", "faiss", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("ragtrack").setLevel(logging.WARNING)


class _Group(click.Group):
    """Print RagtrackError as a clean message with exit status 2, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RagtrackError as e:
            click.echo(f"error: {e}", err=True)  # plain: paths with file:line must not be wrapped
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="ragtrack")
@click.option(
    "--root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Project root (holds pipelines/, golden/, mlruns/, ragtrack.toml).",
)
@click.pass_context
def main(ctx: click.Context, root: str) -> None:
    """Prove that version N+1 of your RAG agent is better than version N.

    \b
    Typical session:
      ragtrack golden validate          # check the golden set against the corpus
      ragtrack eval --version v1        # answer + score every golden item, log to MLflow
      ragtrack eval --version v5
      ragtrack compare v1 v5            # side by side, per type, with confidence intervals
      ragtrack promote v5               # move the 'champion' alias if v5 wins
      ragtrack ui                       # open the MLflow UI on this project's store
    """
    _quiet_libraries()
    ctx.obj = {"root": root}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def metrics_table(metrics: dict[str, float], title: str) -> Table:
    """Overall and per-type means; judge columns show their item count when not all were scored."""
    from ragtrack.evaluation.aggregate import RETRIEVAL_METRICS
    from ragtrack.evaluation.judges import JUDGES
    from ragtrack.golden import TYPES

    table = Table(title=title, title_justify="left", caption="judge scores are 1-5", caption_justify="left")
    table.add_column("metric", no_wrap=True)
    scopes = [("all", "")] + [(f"type {t}", f"/type_{t}") for t in TYPES if f"items/type_{t}" in metrics]
    for label, suffix in scopes:
        n = metrics.get(f"items{suffix}")
        table.add_column(f"{label}\nn={int(n)}" if n is not None else label, justify="right")
    for name in RETRIEVAL_METRICS:
        table.add_row(name, *[_fmt(metrics.get(f"{name}{s}")) for _, s in scopes])
    for judge in JUDGES:
        cells = []
        for _, s in scopes:
            mean, n, total = metrics.get(f"{judge}{s}"), metrics.get(f"{judge}_n{s}"), metrics.get(f"items{s}")
            cell = _fmt(mean, 2)
            if n is not None and total is not None and n < total:
                cell += f" [yellow](n={int(n)}/{int(total)})[/]"
            cells.append(cell)
        table.add_row(judge, *cells)
    return table


@main.command("eval")
@click.option("--version", "version", required=True, help="Version spec: v5 → pipelines/v5.toml, or a .toml path.")
@click.option(
    "--golden",
    "golden_path",
    type=click.Path(dir_okay=False),
    help="Golden set JSONL (default: from ragtrack.toml or golden/golden.jsonl).",
)
@click.option(
    "--corpus", "corpus_path", type=click.Path(), help="Corpus: a .jsonl passage file or a folder of .md/.txt."
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N golden items (a different golden digest).")
@click.option("--llm", help="LLM for the agent's steps, overriding the spec: " + JUDGE_HELP)
@click.option("--judge", help="Judge LLM: " + JUDGE_HELP + "  [default: offline]")
@click.option(
    "--judge-language", type=click.Choice(["en", "zh"]), help="Judge prompt language (default: the golden set's)."
)
@click.option("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite under ./mlruns).")
@click.option("--no-cache", is_flag=True, help="Ignore the LLM response cache (answers are still written to it).")
@click.option("--fresh", is_flag=True, help="Discard the checkpoint of an interrupted run of this eval and start over.")
@click.pass_context
def eval_cmd(ctx, version, golden_path, corpus_path, limit, llm, judge, judge_language, tracking_uri, no_cache, fresh):
    """Answer every golden item with VERSION, score it, and log an MLflow run.

    Retrieval metrics come from context IDs (recall, precision, MRR, hit rate,
    nDCG); judge metrics (correctness, groundedness, relevance, organization)
    from --judge. An interrupted eval resumes where it stopped when you run the
    same command again.
    """
    from ragtrack.api import Progress as Hooks
    from ragtrack.api import evaluate

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    state = {"task": None, "failed": 0}

    def on_stage(stage: str) -> None:
        if state["task"] is None:
            console.print(f"[dim]… {stage}[/]")

    def on_start(total: int, resumed: int) -> None:
        if resumed:
            console.print(f"[cyan]resuming:[/] {resumed}/{total} items already done in an interrupted run")
        bar.start()
        state["task"] = bar.add_task(f"eval {version}", total=total, completed=resumed, status="")

    def on_item(record) -> None:
        if record.errors or any(v.error for v in record.judges.values()):
            state["failed"] += 1
        bar.update(state["task"], advance=1, status=f"[red]{state['failed']} with errors[/]" if state["failed"] else "")

    try:
        report = evaluate(
            version,
            root=ctx.obj["root"],
            golden_path=golden_path,
            corpus_path=corpus_path,
            limit=limit,
            llm=llm,
            judge=judge,
            judge_language=judge_language,
            tracking_uri=tracking_uri,
            use_cache=not no_cache,
            fresh=fresh,
            progress=Hooks(on_stage, on_start, on_item),
        )
    finally:
        if state["task"] is not None:
            bar.stop()

    console.print(metrics_table(report.metrics, f"{report.version} — {len(report.records)} items"))
    _print_accounting(report.accounting)
    if report.findings:
        from ragtrack.evaluation.diagnosis import render

        console.print("[bold]Diagnosis[/] (retrieval first, then generation)")
        console.print(render(report.findings), highlight=False)
    if report.stopped_early:
        err.print(f"[bold red]stopped early:[/] {report.stopped_early}")
        err.print("finished items are logged; run the same command again to resume.")
    console.print(
        f"run [bold]{report.run_id}[/] · model version {report.model_version} · "
        f"index {'from cache' if report.index_from_cache else 'built'}"
    )
    console.print(
        f"open the MLflow UI: [bold]ragtrack ui[/]  (or: mlflow ui --backend-store-uri {report.tracking_uri})"
    )
    sys.exit(0 if report.complete else 1)


def _print_accounting(accounting: dict) -> None:
    rows = [(who, step, f) for who, steps in accounting.items() for step, f in steps.items() if step != "total"]
    if all(f["calls"] + f["cached"] == 0 for _, _, f in rows):  # everything offline: nothing to account for
        return
    table = Table(title="LLM steps", title_justify="left")
    for col in (
        "who",
        "step",
        "calls",
        "cached",
        "offline",
        "failed",
        "retries",
        "truncated",
        "tokens in/out",
        "cost $",
        "p50 s",
        "p95 s",
    ):
        table.add_column(col, justify="left" if col in ("who", "step") else "right")
    for who, step, f in rows:
        table.add_row(
            who,
            step,
            *(str(int(f[k])) for k in ("calls", "cached", "offline", "failed", "retries", "truncated")),
            f"{int(f['tokens_in'])}/{int(f['tokens_out'])}",
            f"{f['cost_usd']:.4f}",
            f"{f['latency_p50_s']:.2f}",
            f"{f['latency_p95_s']:.2f}",
        )
    console.print(table)


@main.command()
@click.argument("version_a")
@click.argument("version_b")
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False), help="Compare runs on this golden set.")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.option("--items", "show_items", default=10, show_default=True, help="How many moved items to list.")
@click.option("--allow-incomparable", is_flag=True, help="Compare runs with different golden sets or judges anyway.")
@click.pass_context
def compare(ctx, version_a, version_b, golden_path, tracking_uri, show_items, allow_incomparable):
    """Put VERSION_A and VERSION_B side by side: means overall and per type, the paired
    difference with a 95% bootstrap interval and a permutation p-value, and the items
    that got better or worse. Logged as a comparison run with a per-type plot.
    """
    from ragtrack.api import compare as run_compare

    report = run_compare(
        version_a,
        version_b,
        root=ctx.obj["root"],
        golden_path=golden_path,
        tracking_uri=tracking_uri,
        allow_incomparable=allow_incomparable,
    )
    a, b = report.a.version, report.b.version
    table = Table(
        title=f"{a} vs {b}  (golden {report.b.golden_digest}, judge {report.b.judge_identity})",
        title_justify="left",
        caption="Δ = b − a; interval: paired bootstrap 95%; * = excludes 0",
        caption_justify="left",
    )
    for col in ("metric", "scope", a, b, "Δ", "95% CI", "p", "n"):
        table.add_column(col, justify="left" if col in ("metric", "scope") else "right", no_wrap=True)
    metric_order = {m: i for i, m in enumerate(dict.fromkeys(r.metric for r in report.rows))}
    for row in sorted(report.rows, key=lambda r: (metric_order[r.metric], r.scope != "all", r.scope)):
        d = row.diff
        colour = "green" if d.significant and d.delta > 0 else "red" if d.significant else ""
        delta = f"[{colour}]{d.delta:+.2f}*[/]" if colour else f"{d.delta:+.2f}"
        n = f"{d.n}" if not row.partial else f"[yellow]{d.n}/{row.items_total}[/]"
        scope = "all" if row.scope == "all" else row.scope.removeprefix("type_")
        table.add_row(
            row.metric if scope == "all" else "",
            scope,
            f"{d.mean_a:.3f}",
            f"{d.mean_b:.3f}",
            delta,
            f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]",
            f"{d.p_value:.3f}",
            n,
            end_section=scope == "D",
        )
    console.print(table)
    moved = [c for c in report.changes if c.metric == "correctness"][:show_items]
    if moved:
        items = Table(title="items that moved (correctness)", title_justify="left")
        for col in ("item", "type", a, b, "question"):
            items.add_column(col)
        for c in moved:
            colour = "green" if c.delta > 0 else "red"
            items.add_row(c.id, c.type, f"{c.a:g}", f"[{colour}]{c.b:g}[/]", c.question)
        console.print(items)
    for w in report.warnings:
        err.print(f"[yellow]warning:[/] {w}")
    console.print(f"comparison run [bold]{report.run_id}[/] (table, items and per_type.png as artifacts)")


@main.command()
@click.argument("version")
@click.option("--dry-run", is_flag=True, help="Decide and report, but do not move the alias or tag versions.")
@click.option("--margin", default=0.0, show_default=True, help="Correctness must beat the champion by more than this.")
@click.option("--tolerance", default=0.0, show_default=True, help="Groundedness may drop by at most this.")
@click.option(
    "--require-significance", is_flag=True, help="Also require the 95% CI of the correctness gain to exclude 0."
)
@click.option("--allow-substitutes", is_flag=True, help="Accept evals that ran with substituted models.")
@click.option("--allow-partial", is_flag=True, help="Accept judge means that cover fewer than all items.")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def promote(
    ctx, version, dry_run, margin, tolerance, require_significance, allow_substitutes, allow_partial, tracking_uri
):
    """Make VERSION the champion if it beats the current one on correctness without
    regressing groundedness (same golden set, same judge). Exit status 0 when promoted
    (or, with --dry-run, when it would be), 1 when refused — usable as a CI gate.
    """
    from ragtrack.api import promote as run_promote

    d = run_promote(
        version,
        root=ctx.obj["root"],
        tracking_uri=tracking_uri,
        margin=margin,
        tolerance=tolerance,
        require_significance=require_significance,
        allow_substitutes=allow_substitutes,
        allow_partial=allow_partial,
        dry_run=dry_run,
    )
    console.print(f"rule: {d.rule}")
    if d.figures.get("champion_correctness") is not None:
        f = d.figures
        console.print(
            f"correctness  {d.champion}: {f['champion_correctness']:.3f}   {d.version}: "
            f"{f['challenger_correctness_paired']:.3f}   Δ {f['correctness_delta']:+.3f} "
            f"[{f['correctness_ci_low']:+.3f}, {f['correctness_ci_high']:+.3f}]"
        )
        console.print(
            f"groundedness {d.champion}: {f['champion_groundedness']:.3f}   {d.version}: "
            f"{f['challenger_groundedness_paired']:.3f}   Δ {f['groundedness_delta']:+.3f}"
        )
    for gate in d.gates:
        mark = "[green]pass[/]" if gate.passed else "[red]fail[/]"
        console.print(f"gate {gate.metric} >= {gate.minimum:g}: {_fmt(gate.value)} {mark}")
    colour = "green" if d.promoted else "red"
    console.print(f"[bold {colour}]{d.summary()}[/]", highlight=False)
    console.print(f"decision recorded in run {d.decision_run_id}")
    sys.exit(0 if d.promoted else 1)


@main.command()
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def versions(ctx, tracking_uri):
    """Registered versions, their model version and spec hash, the last eval per golden
    set with its key metrics, and which one is the champion."""
    from ragtrack.api import versions as list_versions

    rows = list_versions(root=ctx.obj["root"], tracking_uri=tracking_uri)
    if not rows:
        console.print("no versions registered yet; run: ragtrack eval --version v1")
        return
    table = Table(title_justify="left")
    for col in ("version", "model", "spec", "golden", "judge", "recall", "mrr", "correct", "ground", "run"):
        table.add_column(col, no_wrap=True)
    for row in rows:
        label = f"{row.version} [bold green]★[/]" if row.champion else row.version
        if not row.last_evals:
            table.add_row(label, row.model_version, row.spec_hash[:8], "—", "—", "", "", "", "", "no eval yet")
        for n, run in enumerate(row.last_evals):
            m = run.metrics
            judge = run.judge_identity.split("|")[0] + ("*" if run.substituted else "")
            table.add_row(
                label if n == 0 else "",
                row.model_version if n == 0 else "",
                row.spec_hash[:8] if n == 0 else "",
                run.golden_digest[:8],
                judge,
                _fmt(m.get("context_recall")),
                _fmt(m.get("mrr")),
                _fmt(m.get("correctness"), 2),
                _fmt(m.get("groundedness"), 2),
                run.run_id[:8],
            )
    console.print(table)
    console.print("[dim]★ champion · judge* = substituted models in that run · IDs shortened[/]")


@main.group()
def judge() -> None:
    """Judge tools: calibrate against hand-labelled cases."""


@judge.command("calibrate")
@click.option("--judge", "judge_name", default="offline", show_default=True, help="Judge LLM: " + JUDGE_HELP)
@click.option(
    "--cases",
    "cases_path",
    type=click.Path(dir_okay=False),
    help="Calibration JSONL (default: golden/calibration/calibration.jsonl).",
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N cases.")
@click.option("--no-cache", is_flag=True, help="Ignore the LLM response cache.")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def judge_calibrate(ctx, judge_name, cases_path, limit, no_cache, tracking_uri):
    """How well does a judge agree with human labels? Exact and within-one agreement and
    Spearman correlation per judge (and per language), logged to <experiment>-judges."""
    from ragtrack.api import calibrate

    with Progress(
        TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("cases", total=None)
        report = calibrate(
            judge_name,
            root=ctx.obj["root"],
            cases_path=cases_path,
            tracking_uri=tracking_uri,
            use_cache=not no_cache,
            limit=limit,
            on_start=lambda total: bar.update(task, total=total),
            on_case=lambda: bar.advance(task),
        )
    table = Table(
        title=f"judge {judge_name} vs human labels",
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
            table.add_row(a.judge, scope, n, f"{a.exact:.2f}", f"{a.within_one:.2f}", _fmt(a.spearman, 2))
    console.print(table)
    # A judge that always says 5 can look fine on agreement alone: show what it said.
    for name, scores in report.predictions.items():
        given = [s for s in scores if s is not None]
        spread = "  ".join(f"{level}:{given.count(level)}" for level in range(1, 6))
        console.print(f"  {name:<13} scores given  {spread}")
    console.print(f"run [bold]{report.run_id}[/] · judge identity {report.judge_identity}")


@main.group()
def golden() -> None:
    """Golden set tools: validate, stats, retire."""


@golden.command("validate")
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False))
@click.option("--corpus", "corpus_path", type=click.Path())
@click.pass_context
def golden_validate(ctx, golden_path, corpus_path):
    """Check the golden set against the corpus; every problem names file, line and field."""
    from ragtrack.api import load_inputs
    from ragtrack.config import load_config

    corpus, gold = load_inputs(load_config(ctx.obj["root"]), corpus_path, golden_path)
    console.print(
        f"[green]ok[/] {len(gold)} items, {len(corpus)} passages in {len(corpus.documents)} documents; "
        f"digest {gold.digest}"
    )


@golden.command("stats")
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False))
@click.option("--corpus", "corpus_path", type=click.Path())
@click.pass_context
def golden_stats_cmd(ctx, golden_path, corpus_path):
    """Items per type, GT sizes, documents covered."""
    from ragtrack.api import load_inputs
    from ragtrack.config import load_config
    from ragtrack.golden import golden_stats

    corpus, gold = load_inputs(load_config(ctx.obj["root"]), corpus_path, golden_path)
    stats = golden_stats(gold, corpus)
    table = Table(show_header=False)
    for key, value in stats.items():
        table.add_row(
            key,
            ", ".join(f"{k}: {v}" for k, v in value.items())
            if isinstance(value, dict)
            else (f"{value:.2f}" if isinstance(value, float) else str(value)),
        )
    console.print(table)


@golden.command("retire")
@click.argument("versions", nargs=-1, required=True)
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False))
@click.option("--apply", is_flag=True, help="Move them to regression.jsonl beside the golden set (default: only list).")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def golden_retire(ctx, versions, golden_path, apply, tracking_uri):
    """Items that every listed version (e.g. the last three) answered with full marks:
    correctness 5 and every GT passage retrieved. Keep the golden set hard; retired
    items go to a regression set. A changed golden set has a new digest."""
    from ragtrack.api import retire, retirement_candidates

    ids = retirement_candidates(
        list(versions), root=ctx.obj["root"], golden_path=golden_path, tracking_uri=tracking_uri
    )
    if not ids:
        console.print("no item has full marks in every listed version")
        return
    console.print(f"full marks in {', '.join(versions)}: {', '.join(ids)}")
    if apply:
        target = retire(ids, root=ctx.obj["root"], golden_path=golden_path)
        console.print(f"moved {len(ids)} item(s) to {target}")
    else:
        console.print("run again with --apply to move them to the regression set")


@main.command()
@click.option("--port", default=5000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--tracking-uri", help="MLflow tracking URI (default: this project's store).")
@click.pass_context
def ui(ctx, port, host, tracking_uri):
    """Start the MLflow UI on this project's store."""
    from ragtrack.config import load_config
    from ragtrack.tracking.store import resolve_tracking_uri

    config = load_config(ctx.obj["root"])
    uri = resolve_tracking_uri(config, tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if uri.startswith("sqlite:///"):
        cmd += [
            "--default-artifact-root",
            (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri(),
        ]
    console.print(f"MLflow UI on http://{host}:{port}  (Ctrl+C to stop)")
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    main()
