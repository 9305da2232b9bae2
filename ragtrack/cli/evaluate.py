"""``ragtrack eval``: answer and score every golden item with a version, log an MLflow run."""

from __future__ import annotations

import shlex
import sys
import time

import click
from rich.markup import escape

from ragtrack.cli import (
    HUMAN_LABELS,
    JSON_OUT,
    JSON_SO_FAR,
    LLM_HELP,
    MARKDOWN,
    console,
    cyclic_gc_paused,
    engine_options,
    err,
    main,
    show,
    stage,
    warn,
    write_json,
    write_markdown,
)
from ragtrack.cli.corpus import CORPUS_HELP
from ragtrack.cli.golden import GOLDEN_HELP


class ItemProgress:
    """Items done, as a live bar on a terminal, or as plain lines with rate and ETA in a log.

    Outside a terminal (CI, ``| tee``, nohup) a bar would print only when it ends; a line
    every ``every`` items or ``seconds`` seconds, whichever comes first, shows a long eval moving.
    """

    def __init__(self, label: str, every: int = 10, seconds: float = 15.0):
        self.label, self.every, self.seconds = label, every, seconds
        self.bar = None
        self.total = self.done = self.resumed = self.failed = 0
        self.started = self.last_line = 0.0
        self.last_done = 0
        # The first item this process finished: the rate counts from it, not from the start-up.
        self.first_at: float | None = None
        self.first_done = 0

    def start(self, total: int, resumed: int) -> None:
        self.total, self.done, self.resumed = total, resumed, resumed
        self.started = self.last_line = time.monotonic()
        self.last_done = resumed
        if err.is_terminal:  # progress goes to stderr: stdout holds the results a script reads
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=err,
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, completed=resumed, status="")
        else:
            err.print(f"{self.label}: {resumed}/{total} items", highlight=False)

    def advance(self, record) -> None:
        self.done += 1
        self.failed += record.failed
        status = f"{self.failed} with errors" if self.failed else ""
        if self.bar is not None:
            self.bar.update(self.task, advance=1, status=f"[red]{status}[/]" if status else "")
            return
        now = time.monotonic()
        if self.first_at is None:
            self.first_at, self.first_done = now, self.done
        if self.done - self.last_done >= self.every or now - self.last_line >= self.seconds or self.done == self.total:
            self.last_line, self.last_done = now, self.done
            err.print(f"{self.label}: {self.line(now - self.started, now)}" + (f", {status}" if status else ""))

    def line(self, elapsed: float, now: float | None = None) -> str:
        """``12/48 items, 0.8 items/s, ETA 45 s``. With ``now``, the rate counts from the first item this
        process finished: the start-up before it (a Spark session, the index build) made a Spark eval's
        first ETA 111 min; until a second item is done there is no rate to tell."""
        if self.first_at is not None and now is not None:
            measured, seconds = self.done - self.first_done, now - self.first_at
        else:
            measured, seconds = self.done - self.resumed, elapsed
        rate = measured / seconds if seconds > 0 and measured > 0 else 0.0
        if self.done >= self.total:
            eta = "done"
        elif rate:
            eta = f"ETA {_duration((self.total - self.done) / rate)}"
        else:
            eta = "ETA after the next item"
        return f"{self.done}/{self.total} items, {rate:.2f} items/s, {_duration(elapsed)} elapsed, {eta}"

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@main.command("eval")
@click.argument("version_arg", metavar="VERSION", required=False)
@click.option(
    "--version",
    "version",
    help="The same as VERSION (the older spelling, kept for scripts): v5 → pipelines/v5.toml, or a .toml path.",
)
@click.option(
    "--golden",
    "golden_path",
    type=click.Path(dir_okay=False),
    help=GOLDEN_HELP,
)
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N golden items (a different golden digest).")
@click.option("--llm", help="LLM for the agent's steps, overriding the spec: " + LLM_HELP)
@click.option("--judge", help="Judge LLM: " + LLM_HELP + "  [default: [eval] judge of ragtrack.toml, else offline]")
@click.option(
    "--judge-language", type=click.Choice(["en", "zh"]), help="Judge prompt language (default: the golden set's)."
)
@click.option(
    "--judge-samples",
    type=click.IntRange(1, 20),
    help="Ask each LLM judge K times per item (first at temperature 0, then 0.7 with seeds 1..K-1, each cached): "
    "the item's score is the mean, compare's interval carries the judge's noise. The heuristic judges are "
    "deterministic and asked once.  [default: [eval] judge_samples, else 1]",
)
@click.option(
    "--aligned-judge/--plain-judge",
    "judge_aligned",
    default=None,
    help="Judge with the aligned judge `ragtrack judge align` saved for --judge (judges/aligned/<judge>.json: "
    "graded examples from your human labels; another judge identity), or with the plain prompts.  "
    "[default: [eval] judge_aligned, else plain]",
)
@click.option("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite under ./mlruns).")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Ask again instead of reading cached LLM and agent replies (new ones are still cached).",
)
@click.option("--fresh", is_flag=True, help="Discard the checkpoint of an interrupted run of this eval and start over.")
@click.option("--allow-stale", is_flag=True, help="Score items whose GT passages changed since they were written.")
@engine_options("items are answered and judged (on Spark: the registered pyfunc as a UDF)")
@HUMAN_LABELS
@MARKDOWN
@JSON_OUT
@click.pass_context
def eval_cmd(
    ctx,
    version_arg,
    version,
    golden_path,
    corpus_path,
    limit,
    llm,
    judge,
    judge_language,
    judge_samples,
    judge_aligned,
    tracking_uri,
    no_cache,
    fresh,
    allow_stale,
    engine,
    master,
    human_labels,
    markdown,
    json_out,
):
    """Answer every golden item with VERSION, score it, and log an MLflow run.

    VERSION is a spec of pipelines/ (v5 → pipelines/v5.toml) or a .toml path;
    `--version v5` says the same.

    Retrieval metrics come from context IDs (recall, precision, MRR, hit rate,
    nDCG); judge metrics (correctness, groundedness, relevance, organization)
    from --judge. An interrupted (or early-stopped) eval resumes where it stopped
    when you run the same command again, asking again the items whose agent call
    or judge failed; after a run that reached its last item, the same command
    makes a new run that takes answered items from the caches.

    \b
    Examples:
      ragtrack eval v5                                # offline: built-in heuristic judges
      ragtrack eval v5 --judge deepseek               # a [profiles.deepseek] of ragtrack.toml
      ragtrack eval pipelines/examples/dify-app.toml --corpus golden/dify-kb.jsonl
      ragtrack eval v5 --markdown "$GITHUB_STEP_SUMMARY"   # in CI
      ragtrack eval v5 --engine spark --master local[4]     # thousands of items
    """
    if version_arg and version and version_arg != version:
        raise click.UsageError(f"VERSION {version_arg!r} and --version {version!r} disagree: give one")
    version = version_arg or version
    if not version:
        raise click.UsageError("which version? e.g. ragtrack eval v5 (a spec of pipelines/, or a .toml path)")
    with cyclic_gc_paused() as resume:  # set-up makes long-lived objects; items allocate without bound
        from ragtrack import report as view
        from ragtrack.api import Progress as Hooks
        from ragtrack.api import evaluate
        from ragtrack.evaluation.diagnosis import render

        bar = ItemProgress(f"eval {version}")
        state = {"started": False, "done": 0, "total": 0, "kept": None}

        def on_start(total: int, resumed: int) -> None:
            if resumed:
                err.print(f"[cyan]resuming:[/] {resumed}/{total} items already done in an interrupted run")
            state.update(started=True, done=resumed, total=total)
            resume()  # the collector is back on for the items, over what they make
            bar.start(total, resumed)

        def on_item(record) -> None:
            state["done"] += 1
            bar.advance(record)

        def on_warning(message: str) -> None:
            warn(message, style="bold yellow")

        def on_interrupted(kept: int) -> None:
            state["kept"] = kept

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
                judge_samples=judge_samples,
                judge_aligned=judge_aligned,
                tracking_uri=tracking_uri,
                use_cache=not no_cache,
                fresh=fresh,
                allow_stale=allow_stale,
                engine=engine,
                master=master,
                human_labels=human_labels,
                # stages come during the items too (a model loaded on first use), and after them
                progress=Hooks(stage, on_start, on_item, on_warning, on_interrupted),
            )
        except KeyboardInterrupt:
            if state["started"]:
                kept = state["done"] if state["kept"] is None else state["kept"]
                err.print(
                    f"{kept} of {state['total']} items finished and kept in the checkpoint; "
                    "run the same command again to resume"
                )
                ctx.meta[JSON_SO_FAR] = {"items": state["total"], "items_kept": kept}
            raise
        finally:
            bar.stop()

    substituted = " — [bold yellow]substituted models[/]" if report.substituted else ""
    show(
        view.metrics_table(report.metrics, f"{report.version} — {len(report.records)} items{substituted}"),
        view.accounting_table(report.accounting),
    )
    for line in view.node_lines(report.records, report.metrics):
        console.print(line, markup=False, highlight=False)
    for message in report.cautions():  # the agent's again after the table: the numbers above depend on them
        warn(message)
    for line in view.ppi_lines(report.ppi):
        console.print(line, markup=False, highlight=False)
    for message in report.ppi.left_out if report.ppi else ():
        warn(message)
    if errors := report.error_summary():
        err.print("[bold]Errors[/] (items.jsonl in the run holds each item's)")
        for line in errors:
            err.print(f"  {escape(line)}", highlight=False)
    if report.findings:
        console.print("[bold]Diagnosis[/] (retrieval first, then generation)")
        console.print(render(report.findings), markup=False, highlight=False)
    if report.stopped_early:
        err.print(f"[bold red]stopped early:[/] {escape(str(report.stopped_early))}")
        if report.refused:  # a configuration to fix, not an outage to wait out
            err.print("fix the key, model or base_url, then run the same command again: finished items are kept.")
        else:
            err.print("finished items are logged; run the same command again to resume.")
    setup = f" · {report.setup}" if report.setup else ""
    console.print(f"run [bold]{report.run_id}[/] · model version {report.model_version}{setup}")
    from ragtrack.secrets import without_credentials
    from ragtrack.tracking.store import server_ui

    if address := server_ui(report.tracking_uri):
        console.print(f"open the MLflow UI: {escape(address)}")
    else:
        uri = escape(shlex.quote(without_credentials(report.tracking_uri)))  # pasted into a shell as printed
        console.print(f"open the MLflow UI: [bold]ragtrack ui[/]  (or: mlflow ui --backend-store-uri {uri})")
    write_markdown(markdown, report.run_id, ctx.obj["root"], tracking_uri)
    if report.records and not report.measured:
        err.print("[bold red]no question got an answer:[/] nothing was measured (see the errors above)")
    elif not report.judged:
        err.print(
            "[bold red]no judge verdict at all:[/] every judge call failed or was unreadable (see the errors above)"
        )
    status = 2 if report.refused else 0 if report.complete and report.measured and report.judged else 1
    write_json(json_out, view.eval_json(report, status))
    sys.exit(status)
