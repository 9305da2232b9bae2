"""``ragtrack monitor``: score the traffic pulled since the last run; exit 1 when a metric dropped."""

from __future__ import annotations

import sys

import click

from ragtrack.cli import JSON_OUT, console, engine_options, main, show, warn, write_json
from ragtrack.cli.triage import judge_options, message_filters, on_stderr


@main.command("monitor")
@message_filters
@judge_options(0.2)
@click.option(
    "--max-calls",
    type=click.IntRange(min=0),
    help="At most this many judge calls; the sample is cut to fit  [default: [monitor] max_calls, 2000].",
)
@click.option("--dry-run", is_flag=True, help="Show the windows and what judging would cost; write nothing.")
@engine_options("the sample is judged")
@JSON_OUT
@click.pass_context
def monitor_cmd(
    ctx,
    source,
    app,
    since,
    until,
    tracking_uri,
    judge,
    sample_rate,
    no_cache,
    max_calls,
    dry_run,
    engine,
    master,
    json_out,
):
    """Score the production traffic pulled since the last run: for each app version and day with
    new messages, groundedness and relevance on a sample (verdicts written on the traces), and one
    MLflow run in <experiment>-monitor with the dislike, like, no-retrieval and refusal rates and
    the judge means, each with its 95 % interval.

    \b
    A metric worse than the same version's previous day by more than its threshold ([monitor]
    max_drop in ragtrack.toml: dislike_rate 0.05, no_retrieval_rate 0.05, groundedness 0.1,
    relevance 0.1) makes the exit status 1, so cron or CI can alert; days with fewer than
    [monitor] min_messages (20) messages are not compared. The judging cost is printed before the
    first call and bounded by --max-calls. A second run with nothing new judges and logs nothing.

    \b
    Examples:
      ragtrack monitor                              # after each `ragtrack logs pull`
      ragtrack monitor --dry-run --sample-rate 0.5  # what it would cost
      ragtrack monitor --judge deepseek --since 2025-06-05
      ragtrack monitor --judge deepseek --engine spark --master spark://head:7077   # a month of traffic
    """
    from ragtrack import report as view
    from ragtrack.api import monitor

    report = monitor(
        root=ctx.obj["root"],
        tracking_uri=tracking_uri,
        source=source,
        app=app,
        since=since,
        until=until,
        judge=judge,
        sample_rate=sample_rate if ctx.get_parameter_source("sample_rate").name != "DEFAULT" else None,
        max_calls=max_calls,
        dry_run=dry_run,
        use_cache=not no_cache,
        engine=engine,
        master=master,
        **on_stderr(),
    )
    show(view.monitor_table(report))
    for note in report.notes:
        warn(note, "note:", "dim")
    for line in view.monitor_lines(report):
        console.print(line, highlight=False, markup=False)
    status = 1 if report.alarms and not dry_run else 0
    write_json(json_out, view.monitor_json(report, status))
    sys.exit(status)
