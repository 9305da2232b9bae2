"""``ragtrack init``, ``ragtrack ui`` and ``ragtrack cache``: the project around the evaluations."""

from __future__ import annotations

import shlex

import click

from ragtrack.caches import CACHE_KINDS
from ragtrack.cli import LLM_HELP, console, err, main, project_root, warn
from ragtrack.cli.serve import supervise


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option(
    "--lang",
    "language",
    type=click.Choice(["zh", "en"]),
    help="Language of the corpus and prompts (default: detected from the corpus; en without one).",
)
@click.option(
    "--corpus",
    "corpus_path",
    type=click.Path(),
    help="Your documents: a folder of .md/.markdown/.txt files or a .jsonl/.json passage file "
    "(default: DIRECTORY/docs).",
)
@click.option(
    "--llm",
    help="LLM that writes and answers the example questions (default: the [eval] judge of a ragtrack.toml "
    "already in DIRECTORY, else offline templates; a type it writes nothing usable of gets a template): " + LLM_HELP,
)
def init(directory, language, corpus_path, llm):
    """Start a project in DIRECTORY (default: this folder): ragtrack.toml, pipelines/ v1-v5 with
    prompts in your language, an example golden set with one item per type taken from your
    documents, and a README with the next commands. Existing files are kept.

    \b
    Example:
      ragtrack init qa-eval --corpus ~/docs/handbook   # then: cd qa-eval && ragtrack eval v1
    """
    from ragtrack.api import init_project

    report = init_project(
        directory,
        language=language,
        corpus=corpus_path,
        llm=llm,
        progress=lambda line: err.print(f"[dim]{line}[/]", highlight=False),
    )
    console.print(
        f"[green]initialised[/] {report.root} · language {report.language} · versions {report.spec_set} · "
        f"corpus {report.corpus} ({report.documents} documents, {report.passages} passages)",
        highlight=False,
    )
    for name in report.written:
        console.print(f"  wrote {name}", highlight=False)
    for name in report.kept:
        console.print(f"  [dim]kept {name} (already there)[/]", highlight=False)
    if report.example_types:
        console.print(f"  {report.examples}", highlight=False)
    for w in report.corpus_warnings[:8]:
        warn(w, "corpus warning")
    if len(report.corpus_warnings) > 8:
        err.print(f"… and {len(report.corpus_warnings) - 8} more (`ragtrack corpus ls` lists them all)")
    for note in report.notes:
        warn(note, "note:")
    where = "" if directory == "." else f"cd {shlex.quote(directory)} && "
    console.print(f"next: {where}ragtrack golden validate && ragtrack eval v1", highlight=False)


@main.command()
@click.option("--port", default=5000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--tracking-uri", help="MLflow tracking URI (default: this project's store).")
@click.pass_context
def ui(ctx, port, host, tracking_uri):
    """Start the MLflow UI on this project's store."""
    from ragtrack.api import ui_command

    cmd = ui_command(root=project_root(ctx), tracking_uri=tracking_uri, host=host, port=port)
    err.print(f"starting the MLflow UI on http://{host}:{port} …")
    supervise(cmd, host, port, f"MLflow UI on http://{host}:{port}  (Ctrl+C to stop)")


@main.group()
def cache() -> None:
    """What the project keeps in .ragtrack/cache (indexes, vectors, LLM and agent replies), and
    pruning it. Deleting an entry never changes a result: the next run that needs it rebuilds
    it or asks again (LLM replies cost money to ask again, so nothing is pruned on its own).

    \b
    Examples:
      ragtrack cache info                            # entries, size and last use per kind
      ragtrack cache prune --unused-for 30 --dry-run # what a prune would delete
      ragtrack cache prune --unused-for 30 --kind index --kind vectors
    """


_KIND = click.option(
    "--kind", "kinds", multiple=True, type=click.Choice(CACHE_KINDS.names()), help="Only this kind (repeatable)."
)


@cache.command("info")
@_KIND
@click.pass_context
def cache_info(ctx, kinds):
    """Entries, size and last use of each kind of cache."""
    from ragtrack import report as view
    from ragtrack.api import cache_entries

    found = cache_entries(root=ctx.obj["root"], kinds=list(kinds))
    console.print(view.cache_table(found) if found else "nothing cached yet")


@cache.command("prune")
@click.option(
    "--unused-for",
    "days",
    type=click.FloatRange(min=0),
    required=True,
    metavar="DAYS",
    help="Delete entries no run has used for this many days (0: everything).",
)
@_KIND
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.pass_context
def cache_prune(ctx, days, kinds, dry_run):
    """Delete cache entries that no run has used for DAYS days."""
    from ragtrack import report as view
    from ragtrack.api import prune_cache

    removed = prune_cache(days, root=ctx.obj["root"], kinds=list(kinds), dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    noun = "entry" if len(removed) == 1 else "entries"
    console.print(f"{verb} {len(removed)} {noun}, {view.size(sum(e.bytes for e in removed))}")
    if removed:
        console.print(view.cache_table(removed))
