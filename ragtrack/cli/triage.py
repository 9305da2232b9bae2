"""``ragtrack logs triage``: the pulled messages' bad cases, clustered and ranked by evidence."""

from __future__ import annotations

import click

from ragtrack.cli import JSON_OUT, LLM_HELP, WHEN, console, err, show
from ragtrack.cli.corpus import CORPUS_HELP
from ragtrack.cli.golden import GOLDEN_HELP
from ragtrack.cli.logs import logs


def message_filters(f):
    """--source, --app, --since, --until, --tracking-uri: which pulled messages a command reads."""
    f = click.option("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or ./mlruns).")(f)
    f = click.option(
        "--until", type=WHEN, help="Only messages answered before this date or time (ISO 8601, UTC unless it says)."
    )(f)
    f = click.option(
        "--since", type=WHEN, help="Only messages answered from this date or time on (ISO 8601, UTC unless it says)."
    )(f)
    f = click.option("--app", help="Only messages of this app / version (as pulled).")(f)
    return click.option("--source", help="Only messages pulled from this source (dify, ragflow, mlflow, jsonl).")(f)


def judge_options(default_rate: float, no_cache: bool = True):
    """--judge, --sample-rate (and --no-cache unless the command has one): the judging of a sample."""

    def add(f):
        if no_cache:
            f = click.option("--no-cache", is_flag=True, help="Ignore the LLM response cache.")(f)
        f = click.option(
            "--sample-rate",
            type=click.FloatRange(0, 1),
            default=default_rate,
            show_default=True,
            help="Share of messages judged (the same ones on every run: chosen by a hash of each message).",
        )(f)
        return click.option(
            "--judge", default="offline", show_default=True, help="Judge for groundedness and relevance: " + LLM_HELP
        )(f)

    return add


def on_stderr() -> dict:
    """``on_cost`` and ``progress`` for the API: the judging cost and each step on stderr."""
    return {
        "on_cost": lambda cost: err.print(f"judging: {cost}", highlight=False, markup=False),
        "progress": lambda line: err.print(line, highlight=False, markup=False),
    }


def triage_options(f):
    """The triage knobs: cluster and coverage similarity, the weak-retrieval score."""
    from ragtrack.production.thresholds import (
        CLUSTER_SIMILARITY,
        COVERAGE_SIMILARITY,
        LOW_RETRIEVAL_SCORE,
        WORDING_SIMILARITY,
    )

    f = click.option(
        "--low-score",
        type=float,
        default=LOW_RETRIEVAL_SCORE,
        show_default=True,
        help="A message whose best context scored below this retrieved weakly.",
    )(f)
    f = click.option(
        "--coverage",
        type=click.FloatRange(0, 1),
        default=COVERAGE_SIMILARITY,
        show_default=True,
        help="A cluster this similar to a golden item's question is covered by it.",
    )(f)
    return click.option(
        "--similarity",
        type=click.FloatRange(0, 1),
        default=None,
        help=(
            "Questions at least this similar are near-duplicates (one cluster). "
            f"[default: {CLUSTER_SIMILARITY} by meaning + wording, {WORDING_SIMILARITY} by wording alone, "
            "when the language has no embedder]"
        ),
    )(f)


@logs.command("triage")
@message_filters
@judge_options(0.25)
@triage_options
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Clusters shown.")
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False), help=GOLDEN_HELP)
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@JSON_OUT
@click.pass_context
def logs_triage(
    ctx, source, app, since, until, tracking_uri, judge, sample_rate, no_cache, similarity, coverage, low_score,
    limit, golden_path, corpus_path, json_out,
):  # fmt: skip
    """Rank the pulled messages' bad cases by evidence: clusters of near-duplicate questions, each
    with its messages and distinct users.

    \b
    Evidence, strongest first: dislikes (by distinct users), low groundedness or relevance from a
    reference-free judge on a sample of the rest, no retrieval or a refusal, very low retrieval
    scores. Questions are compared by the project language's embedder plus their wording (the
    output says which). A cluster close to a golden item's question is marked "covered by <id>":
    `ragtrack golden propose --from-logs` does not propose it again.

    \b
    Examples:
      ragtrack logs triage
      ragtrack logs triage --since 2025-06-04 --app helpdesk-v2 --json triage.json
      ragtrack logs triage --judge deepseek --sample-rate 0.1
    """
    from ragtrack import report as view
    from ragtrack.api import triage_logs
    from ragtrack.cli import write_json

    report = triage_logs(
        root=ctx.obj["root"],
        tracking_uri=tracking_uri,
        source=source,
        app=app,
        since=since,
        until=until,
        judge=judge,
        sample_rate=sample_rate,
        similarity=similarity,
        coverage=coverage,
        low_score=low_score,
        golden_path=golden_path,
        corpus_path=corpus_path,
        use_cache=not no_cache,
        **on_stderr(),
    )
    show(view.triage_table(report, limit))
    for line in view.triage_lines(report):
        console.print(line, highlight=False, markup=False)
    if json_out is not None:
        write_json(json_out, [c.to_json() for c in report.triage.clusters])  # type: ignore[arg-type]
