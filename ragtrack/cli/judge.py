"""``ragtrack judge``: judge tools."""

from __future__ import annotations

import click

from ragtrack.cli import LLM_HELP, console, err, main


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

    from ragtrack import report as view
    from ragtrack.api import calibrate

    columns = TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:  # no bar frames in a CI log
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
    console.print(view.calibration_table(report))
    for line in view.score_spread_lines(report):
        console.print(line)
    console.print(f"run [bold]{report.run_id}[/] · judge identity {report.judge_identity}")
