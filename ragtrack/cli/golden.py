"""``ragtrack golden``: golden set tools."""

from __future__ import annotations

import click

from ragtrack.cli import console, main


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
    from ragtrack import report as view
    from ragtrack.api import golden_stats

    console.print(
        view.stats_table(golden_stats(root=ctx.obj["root"], corpus_path=corpus_path, golden_path=golden_path))
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
