"""``ragtrack compare``, ``promote`` and ``versions``: deciding between versions."""

from __future__ import annotations

import sys

import click

from ragtrack.cli import (
    HUMAN_LABELS,
    JSON_OUT,
    MARKDOWN,
    console,
    cyclic_gc_paused,
    main,
    project_root,
    show,
    warn,
    write_json,
    write_markdown,
)

#: ``compare``'s output width unless ``--wide``: a CI log or a terminal of 120 columns shows it uncut.
COMPARE_WIDTH = 120

_AS_EVALUATED = click.option(
    "--llm", help="The version as `ragtrack eval --llm` ran it (an LLM override is a model version of its own)."
)


@main.command()
@click.argument("version_a")
@click.argument("version_b")
@click.option(
    "--golden",
    "golden_path",
    type=click.Path(dir_okay=False),
    help="Compare runs on this golden set (default: the golden set of VERSION_B's latest eval).",
)
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.option("--items", "show_items", default=10, show_default=True, help="How many moved items to list.")
@click.option("--allow-incomparable", is_flag=True, help="Compare runs with different golden sets or judges anyway.")
@click.option(
    "--cluster",
    help="What the intervals treat as one unit: document (default: items sharing any GT document), item, type, tag "
    "(default: [compare] cluster in ragtrack.toml).",
)
@click.option(
    "--delta",
    type=float,
    help="A difference you care about: the items needed to detect it at 80% power, from new documents and "
    "from new items on these documents.",
)
@click.option(
    "--wide", is_flag=True, help="Also the raw p, the clusters and the SE of each row (wider than 120 columns)."
)
@HUMAN_LABELS
@_AS_EVALUATED
@MARKDOWN
@JSON_OUT
@click.pass_context
def compare(
    ctx,
    version_a,
    version_b,
    golden_path,
    tracking_uri,
    show_items,
    allow_incomparable,
    cluster,
    delta,
    wide,
    human_labels,
    llm,
    markdown,
    json_out,
):
    """Put VERSION_A and VERSION_B side by side: means overall and per type, the paired
    difference with a 95% t interval over clusters (items sharing GT documents) and its
    sign-flip p-value Holm-adjusted across the table (◆ marks the promotion rule's metrics),
    the minimum detectable Δ of this set, and the items whose correctness got better or worse.
    Fits 120 columns; --wide adds the raw p, the clusters and the SE of each row.
    Logged as a comparison run with a per-type plot, once per pair of eval runs: comparing the
    same two runs again reuses that run. Each side is its spec as it is in this checkout;
    VERSION_A may be `champion`, the registry's champion whatever its name.

    \b
    Examples:
      ragtrack compare v1 v5            # each version's latest eval on the same golden set and judge
      ragtrack compare champion bm25    # a branch that keeps the champion's name: bm25@1 vs bm25@3
      ragtrack compare v1 v5 --cluster item --delta 0.2   # items independent; items needed for Δ 0.2
    """
    with cyclic_gc_paused():  # two runs' records, a few hundred resamplings and one plot
        from ragtrack import report as view
        from ragtrack.api import compare as run_compare
        from ragtrack.api.decisions import SameAsChampion

        try:
            report = run_compare(
                version_a,
                version_b,
                root=project_root(ctx),
                golden_path=golden_path,
                tracking_uri=tracking_uri,
                allow_incomparable=allow_incomparable,
                llm=llm,
                cluster=cluster,
                delta=delta,
                human_labels=human_labels,
            )
        except SameAsChampion as same:
            console.print(str(same))
            write_json(
                json_out, {"command": "compare", "same_as_champion": True, "message": str(same), "exit_status": 0}
            )
            sys.exit(0)
    full = console.width
    if not wide:  # a terminal or a CI log: at most 120 columns (long questions and lines wrap)
        console.width = min(full, COMPARE_WIDTH)
    try:
        show(view.comparison_table(report, wide))
        for line in [*view.power_lines(report.power, report.clusters), *view.judge_spread_lines(report)]:
            console.print(line, highlight=False)
        for line in view.ppi_lines(report.ppi, delta=True):
            console.print(line, markup=False, highlight=False)
        show(view.moved_items_table(report, show_items))
    finally:  # the console outlives the command in a caller's process (a test's CliRunner)
        console.width = full
    for w in report.warnings:
        warn(w)
    console.print(f"comparison run [bold]{report.run_id}[/] (table, items and per_type.png as artifacts)")
    write_markdown(markdown, report.run_id, ctx.obj["root"], tracking_uri)
    write_json(json_out, view.comparison_json(report))


@main.command()
@click.argument("version")
@click.option("--dry-run", is_flag=True, help="Decide and report, but do not move the alias or tag versions.")
@click.option("--margin", default=0.0, show_default=True, help="Correctness must beat the champion by more than this.")
@click.option(
    "--tolerance",
    type=float,
    help="Groundedness may drop by at most this (default 0; with --require-interval the non-inferiority "
    "margin, 0.5 on the 1-5 scale, and it must be above 0).",
)
@click.option(
    "--require-significance",
    is_flag=True,
    help="Also require the correctness gain to be significant: 95% CI excluding 0 and p < 0.05.",
)
@click.option(
    "--require-interval",
    is_flag=True,
    help="Also require the 95% intervals to show it: correctness Δ low > margin (superiority), groundedness "
    "Δ low > -tolerance (non-inferiority) (default: [promotion] require_interval, off).",
)
@click.option("--allow-substitutes", is_flag=True, help="Accept evals that ran with substituted models.")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Accept judge means that cover fewer than all items, and evals cut by --limit.",
)
@click.option("--tracking-uri", help="MLflow tracking URI.")
@_AS_EVALUATED
@MARKDOWN
@JSON_OUT
@click.pass_context
def promote(
    ctx,
    version,
    dry_run,
    margin,
    tolerance,
    require_significance,
    require_interval,
    allow_substitutes,
    allow_partial,
    tracking_uri,
    llm,
    markdown,
    json_out,
):
    """Make VERSION the champion if it beats the current one on correctness without
    regressing groundedness (same golden set, same judge). Exit status 0 when promoted
    (or, with --dry-run, when it would be) or already the champion, 1 when refused —
    usable as a CI gate.

    \b
    Examples:
      ragtrack promote v5 --dry-run     # what the rule decides, the alias untouched
      ragtrack promote v5 --margin 0.1 --require-significance
    """
    with cyclic_gc_paused():  # two runs' records, their statistics and an alias move
        from ragtrack import report as view
        from ragtrack.api import promote as run_promote

        decision = run_promote(
            version,
            root=project_root(ctx),
            tracking_uri=tracking_uri,
            margin=margin,
            tolerance=tolerance,
            require_significance=require_significance,
            require_interval=require_interval,
            allow_substitutes=allow_substitutes,
            allow_partial=allow_partial,
            dry_run=dry_run,
            llm=llm,
        )
    for line in view.decision_lines(decision):
        console.print(line, highlight=False)
    write_markdown(markdown, decision.decision_run_id, ctx.obj["root"], tracking_uri)
    write_json(json_out, view.decision_json(decision))
    sys.exit(0 if decision.accepted else 1)


@main.command()
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def versions(ctx, tracking_uri):
    """Registered versions, their model version and spec hash, the last eval per golden
    set with its key metrics, and which one is the champion."""
    with cyclic_gc_paused():  # a few queries of the store
        from ragtrack import report as view
        from ragtrack.api import champion_notes
        from ragtrack.api import versions as list_versions

        rows = list_versions(root=project_root(ctx), tracking_uri=tracking_uri)
        notes = champion_notes(root=project_root(ctx), tracking_uri=tracking_uri) if rows else []
    if not rows:
        console.print("no versions registered yet; run: ragtrack eval --version v1")
        return
    console.print(view.versions_table(rows))
    console.print(
        "[dim]★ champion · after a run: * substituted models, ~ a mean covers fewer items than the run "
        "(n in `ragtrack compare`), ! cautions (--limit, --allow-stale, agent warnings) · IDs shortened to 7[/]"
    )
    for note in notes:
        warn(note)
