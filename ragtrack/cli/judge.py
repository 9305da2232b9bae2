"""``ragtrack judge``: judge tools."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from ragtrack.cli import LLM_HELP, console, err, main


@contextmanager
def counting(label: str) -> Iterator[dict[str, Callable]]:
    """A progress bar on stderr over a judge tool's calls (none in a CI log), as its ``on_start`` /
    ``on_case`` hooks."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task(label, total=None)
        yield {"on_start": lambda total: bar.update(task, total=total), "on_case": lambda: bar.advance(task)}


@main.group()
def judge() -> None:
    """Judge tools: calibrate against hand-labelled cases, align an LLM judge to them."""


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
    from ragtrack import report as view
    from ragtrack.api import calibrate

    with counting("calibrate") as hooks:
        report = calibrate(
            judge_name,
            root=ctx.obj["root"],
            cases_path=cases_path,
            tracking_uri=tracking_uri,
            use_cache=not no_cache,
            limit=limit,
            **hooks,
        )
    console.print(view.calibration_table(report))
    for line in view.score_spread_lines(report):
        console.print(line)
    console.print(f"run [bold]{report.run_id}[/] · judge identity {report.judge_identity}")


@judge.command("align")
@click.option(
    "--judge",
    "judge_name",
    required=True,
    help="Judge LLM to align: openai:<model>, local:<path|smollm2> or a ragtrack.toml profile (the offline "
    "heuristics read no prompt).",
)
@click.option(
    "--cases",
    "cases_path",
    type=click.Path(dir_okay=False),
    help="Human-labelled cases (default: golden/calibration/calibration.jsonl), or a human-label file "
    "(`ragtrack labels pull` writes one): each version's labelled answer is a case.",
)
@click.option(
    "--examples",
    type=click.IntRange(3, 5),
    default=5,
    show_default=True,
    help="Graded examples per judge and language, spread over the score range.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the pool / held-out split.")
@click.option("--no-cache", is_flag=True, help="Ignore the LLM response cache.")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def judge_align(ctx, judge_name, cases_path, examples, seed, no_cache, tracking_uri):
    """Show an LLM judge graded examples from the human labels, and keep them only if it then agrees
    better with the labels on cases it was not shown.

    Per judge: ~30% of the labelled cases (stratified by language and label, --seed) are the pool the
    examples come from, the rest the held-out split; the plain and the aligned prompt both judge the
    held-out split (exact, within-one, Spearman). The judges none of whose figures got worse and at least one better are
    saved as judges/aligned/<judge>.json, a new judge identity; if none did, nothing is saved.

    \b
    Example:
      ragtrack judge align --judge deepseek
      ragtrack eval --version v5 --judge deepseek --aligned-judge
    """
    from ragtrack import report as view
    from ragtrack.api import align

    with counting("align") as hooks:
        report = align(
            judge_name,
            root=ctx.obj["root"],
            cases_path=cases_path,
            seed=seed,
            examples=examples,
            tracking_uri=tracking_uri,
            use_cache=not no_cache,
            **hooks,
        )
    console.print(view.alignment_table(report))
    for line in view.alignment_lines(report):
        console.print(line)
