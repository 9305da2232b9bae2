"""``ragtrack labels``: human labels in MLflow's review queues."""

from __future__ import annotations

import click

from ragtrack.cli import console, main, project_root, stage, warn


@main.group()
def labels() -> None:
    """Label versions' answers in the MLflow UI's review queues, and pull the labels back.

    \b
      ragtrack labels queue v5        # a review queue of 20 of v5's item traces, stratified by type
      ragtrack ui                     # Review queues tab: score each trace 1-5 per judged metric
      ragtrack labels pull            # the HUMAN scores into golden/labels/human-labels.jsonl
      ragtrack compare v1 v5          # prediction-powered figures from them
    """


@labels.command("queue")
@click.argument("version")
@click.option(
    "--size",
    type=click.IntRange(min=1),
    default=None,
    help="Items to send to review (default: the sample rule's 20), split over the question types in proportion "
    "to their items (each type at least one): prediction-powered figures need 10 labelled items per metric, "
    "and narrow as 1/√n.",
)
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def labels_queue(ctx, version, size, tracking_uri):
    """A review queue over VERSION's latest eval: a stratified sample of its item traces (each shows the
    question, the contexts with their passage IDs, the GT passages and the GT answer) and a 1-5 question
    per judged metric, with the rubric the judge uses, in the golden set's language. Run again, it tops up
    the same queue (an item's status and labels are kept)."""
    from ragtrack.api import queue_labels

    root = project_root(ctx)
    stage(f"queueing {version}'s item traces for review")
    report = queue_labels(version, root=root, tracking_uri=tracking_uri, **({"size": size} if size else {}))
    sampled = ", ".join(f"{kind} {n}" for kind, n in report.sampled.items())
    console.print(
        f"queue [bold]{report.queue}[/] ({report.queue_id}): {report.items} item traces of {version}'s eval "
        f"{report.run_id[:8]} ({sampled}); metrics {', '.join(f'human/{m}' for m in report.metrics)} "
        f"(rubric: {report.language})",
        highlight=False,
    )
    for item in report.untraced:
        warn(f"{item} was sampled but its eval run has no trace of it: not queued")
    console.print(
        f"label them in the MLflow UI ({report.ui or 'ragtrack ui'}): the experiment's Review queues tab; "
        "then: ragtrack labels pull",
        highlight=False,
    )


@labels.command("pull")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The label file to write.  [default: [project] human_labels of ragtrack.toml, else "
    "golden/labels/human-labels.jsonl]",
)
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def labels_pull(ctx, out, tracking_uri):
    """The HUMAN scores given in the review queues into the label file eval and compare read (their
    prediction-powered figures): one line per version's answer to an item, with who scored it and when.
    The store is where labels live: a line it has replaces the file's; the file's other lines (labels
    imported from elsewhere) are kept."""
    from ragtrack.api import pull_labels

    root = project_root(ctx)
    report = pull_labels(root=root, tracking_uri=tracking_uri, out=out)
    for line in report.skipped:
        warn(line)
    per_version = ", ".join(f"{v} {n}" for v, n in report.labelled.items()) or "none"
    console.print(
        f"wrote {report.path}: {report.scores} scores from the review queues (answers labelled: {per_version})"
        + (f"; kept {report.kept} line(s) the store does not have" if report.kept else ""),
        highlight=False,
    )
