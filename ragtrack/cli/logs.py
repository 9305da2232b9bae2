"""``ragtrack logs``: what a deployed app answered in production, read back into the project's store."""

from __future__ import annotations

import click

from ragtrack.cli import JSON_OUT, console, err, main, write_json
from ragtrack.cli.corpus import CORPUS_HELP


@main.group()
def logs() -> None:
    """Production logs: pull an app's conversations, with its users' ratings, into MLflow traces."""


@logs.command("pull")
@click.option(
    "--from",
    "kind",
    required=True,
    metavar="dify|ragflow|mlflow|jsonl",
    help="Where the conversations are (an unknown name is refused).",
)
@click.argument("target", required=False, metavar="[FILE|EXPERIMENT]")
@click.option(
    "--version",
    help="Version spec of the app (pipelines/<NAME>.toml): its base_url and api_key_env, as eval uses them. "
    "Required for dify and ragflow; with mlflow, a Dify spec joins /app/feedbacks ratings to Dify's traces.",
)
@click.option(
    "--app", help="Label the stored messages carry  [default: the version's name, the experiment's, or app_version]."
)
@click.option(
    "--source-uri", help="mlflow: tracking URI of the store holding the app's traces  [default: the project's store]."
)
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@click.option("--tracking-uri", help="MLflow tracking URI of the project (default: MLFLOW_TRACKING_URI or ./mlruns).")
@JSON_OUT
@click.pass_context
def logs_pull(ctx, kind, target, version, app, source_uri, corpus_path, tracking_uri, json_out):
    """Pull production conversations: each answered question becomes one MLflow trace in the
    <experiment>-production experiment, with the app/version that served it, the end user (hashed),
    their rating and comment as HUMAN feedback, and the contexts mapped to canonical passage IDs.

    \b
    Incremental and idempotent: a second pull adds only what is new, and a rating changed since
    (like -> dislike) updates its assessment. Interrupted, it resumes where it stopped
    (.ragtrack/production/cursors/). Progress goes to stderr; the summary says what was pulled,
    what was new or re-rated, and what could not be read and why.

    \b
    Examples:
      ragtrack logs pull --from dify --version dify-app       # service API: /app/feedbacks, /messages
      ragtrack logs pull --from ragflow --version ragflow-app  # the assistant's sessions
      ragtrack logs pull --from mlflow dify-traces --version dify-app   # Dify's MLflow traces + ratings
      ragtrack logs pull --from jsonl export.jsonl            # one record per answered question
    """
    from ragtrack import report as view
    from ragtrack.api import pull_logs
    from ragtrack.errors import RagtrackError

    needs = {
        "jsonl": "the export: ragtrack logs pull --from jsonl FILE",
        "mlflow": "the experiment holding the app's traces: ragtrack logs pull --from mlflow EXPERIMENT",
    }
    if kind in needs and not target:
        raise RagtrackError(f"--from {kind} needs {needs[kind]}")
    if kind in ("dify", "ragflow") and target:
        raise RagtrackError(f"--from {kind} reads the app of a version spec (--version NAME), not {target!r}")
    report = pull_logs(
        kind,
        version=version,
        path=target if kind == "jsonl" else None,
        experiment=target if kind == "mlflow" else None,
        source_uri=source_uri,
        app=app,
        corpus=corpus_path,
        root=ctx.obj["root"],
        tracking_uri=tracking_uri,
        progress=lambda line: err.print(line, highlight=False, markup=False),
    )
    for line in view.pull_lines(report):
        console.print(line, highlight=False, markup=False)
    write_json(json_out, view.pull_json(report))
