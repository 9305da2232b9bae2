"""The ``ragtrack`` command line: a thin shell over :mod:`ragtrack.api`, rendered by :mod:`ragtrack.report`."""

from __future__ import annotations

import logging
import os
import sys
import warnings

import click
from rich.console import Console

from ragtrack.errors import RagtrackError

console = Console(stderr=False)
err = Console(stderr=True)
MACHINE_WIDTH = 1000  # columns when not printing to a terminal

LLM_HELP = "offline (heuristic judges), openai:<model>, local:<path|smollm2> or a profile from ragtrack.toml."


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
    """Every error a user can cause is one line on stderr and exit status 2, never a traceback."""

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
    for c in (console, err):
        if not c.is_terminal:  # a pipe or a CI log: print tables whole, never cut to 80 columns
            c.width = MACHINE_WIDTH
    ctx.obj = {"root": root}


def _print(*renderables) -> None:
    for r in renderables:
        if r is not None:
            console.print(r)


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
@click.option("--llm", help="LLM for the agent's steps, overriding the spec: " + LLM_HELP)
@click.option("--judge", help="Judge LLM: " + LLM_HELP + "  [default: offline]")
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ragtrack import report as show
    from ragtrack.api import Progress as Hooks
    from ragtrack.api import evaluate
    from ragtrack.evaluation.diagnosis import render

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
        state["failed"] += record.failed
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

    _print(
        show.metrics_table(report.metrics, f"{report.version} — {len(report.records)} items"),
        show.accounting_table(report.accounting),
    )
    if report.findings:
        console.print("[bold]Diagnosis[/] (retrieval first, then generation)")
        console.print(render(report.findings), highlight=False)
    if report.stopped_early:
        err.print(f"[bold red]stopped early:[/] {report.stopped_early}")
        err.print("finished items are logged; run the same command again to resume.")
    setup = f" · {report.setup}" if report.setup else ""
    console.print(f"run [bold]{report.run_id}[/] · model version {report.model_version}{setup}")
    console.print(
        f"open the MLflow UI: [bold]ragtrack ui[/]  (or: mlflow ui --backend-store-uri {report.tracking_uri})"
    )
    sys.exit(0 if report.complete else 1)


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
    from ragtrack import report as show
    from ragtrack.api import compare as run_compare

    report = run_compare(
        version_a,
        version_b,
        root=ctx.obj["root"],
        golden_path=golden_path,
        tracking_uri=tracking_uri,
        allow_incomparable=allow_incomparable,
    )
    _print(show.comparison_table(report), show.moved_items_table(report, show_items))
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
    from ragtrack import report as show
    from ragtrack.api import promote as run_promote

    decision = run_promote(
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
    for line in show.decision_lines(decision):
        console.print(line, highlight=False)
    sys.exit(0 if decision.promoted else 1)


@main.command()
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def versions(ctx, tracking_uri):
    """Registered versions, their model version and spec hash, the last eval per golden
    set with its key metrics, and which one is the champion."""
    from ragtrack import report as show
    from ragtrack.api import versions as list_versions

    rows = list_versions(root=ctx.obj["root"], tracking_uri=tracking_uri)
    if not rows:
        console.print("no versions registered yet; run: ragtrack eval --version v1")
        return
    console.print(show.versions_table(rows))
    console.print("[dim]★ champion · judge* = substituted models in that run · IDs shortened[/]")


@main.group()
def judge() -> None:
    """Judge tools: calibrate against hand-labelled cases."""


@judge.command("calibrate")
@click.option("--judge", "judge_name", default="offline", show_default=True, help="Judge LLM: " + LLM_HELP)
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ragtrack import report as show
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
    console.print(show.calibration_table(report))
    for line in show.score_spread_lines(report):
        console.print(line)
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
    from ragtrack.api import validate_golden

    corpus, gold = validate_golden(root=ctx.obj["root"], corpus_path=corpus_path, golden_path=golden_path)
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
    from ragtrack import report as show
    from ragtrack.api import golden_stats

    console.print(
        show.stats_table(golden_stats(root=ctx.obj["root"], corpus_path=corpus_path, golden_path=golden_path))
    )


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
    from ragtrack.api import ui_command

    cmd = ui_command(root=ctx.obj["root"], tracking_uri=tracking_uri, host=host, port=port)
    console.print(f"MLflow UI on http://{host}:{port}  (Ctrl+C to stop)")
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
