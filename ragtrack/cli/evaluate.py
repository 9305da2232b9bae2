"""``ragtrack eval``: answer and score every golden item with a version, log an MLflow run."""

from __future__ import annotations

import sys

import click

from ragtrack.cli import LLM_HELP, console, err, main, show


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
@click.option("--allow-stale", is_flag=True, help="Score items whose GT passages changed since they were written.")
@click.pass_context
def eval_cmd(
    ctx,
    version,
    golden_path,
    corpus_path,
    limit,
    llm,
    judge,
    judge_language,
    tracking_uri,
    no_cache,
    fresh,
    allow_stale,
):
    """Answer every golden item with VERSION, score it, and log an MLflow run.

    Retrieval metrics come from context IDs (recall, precision, MRR, hit rate,
    nDCG); judge metrics (correctness, groundedness, relevance, organization)
    from --judge. An interrupted eval resumes where it stopped when you run the
    same command again.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ragtrack import report as view
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
            allow_stale=allow_stale,
            progress=Hooks(on_stage, on_start, on_item),
        )
    except KeyboardInterrupt:
        if state["task"] is not None:
            err.print("finished items are kept in the checkpoint; run the same command again to resume")
        raise
    finally:
        if state["task"] is not None:
            bar.stop()

    show(
        view.metrics_table(report.metrics, f"{report.version} — {len(report.records)} items"),
        view.accounting_table(report.accounting),
    )
    for warning in view.eval_warnings(report.metrics):
        err.print(f"[yellow]warning:[/] {warning}")
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
