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


@main.group()
def golden() -> None:
    """Golden set tools: validate, stats."""


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
