"""``ragtrack corpus``: the canonical passages golden sets are written against."""

from __future__ import annotations

import json

import click
from rich.markup import escape

from ragtrack.cli import console, main, stage, warn

CORPUS_HELP = (
    "Corpus: a .jsonl or .json passage file, or a folder of .md/.markdown/.txt "
    "(default: from ragtrack.toml or golden/kb)."
)


def echo_json(payload: object) -> None:
    """Machine output: plain JSON on stdout, never wrapped or coloured."""
    click.echo(json.dumps(payload, ensure_ascii=False, indent=1))


@main.group()
def corpus() -> None:
    """Corpus tools: the canonical passages (and their IDs) that golden sets name."""


@corpus.command("ls")
@click.option("--doc", help="Only this document (its path in the corpus), or every document under a folder.")
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (id, doc_id, title, chars, fingerprint).")
@click.pass_context
def corpus_ls(ctx, doc, corpus_path, as_json):
    """Passage IDs with their heading paths and sizes, in document order."""
    from ragtrack import report as view
    from ragtrack.api import list_passages, open_corpus

    loaded = open_corpus(ctx.obj["root"], corpus_path)
    rows = list_passages(root=ctx.obj["root"], corpus_path=corpus_path, doc=doc, corpus=loaded)
    if as_json:
        echo_json([r.to_json() for r in rows])
        return
    console.print(view.passages_table(rows))
    for w in loaded.warnings:  # all of them: this is where a user looks at how the corpus was split
        warn(w)


@corpus.command("show")
@click.argument("passage_id")
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with the full text).")
@click.pass_context
def corpus_show(ctx, passage_id, corpus_path, as_json):
    """One passage's full text, with its document, heading path and fingerprint."""
    from ragtrack.api import show_passage

    row = show_passage(passage_id, root=ctx.obj["root"], corpus_path=corpus_path)
    if as_json:
        echo_json(row.to_json())
        return
    console.print(f"[bold]{escape(str(row.id))}[/]", highlight=False)
    console.print(
        f"document {escape(str(row.doc_id))} · {row.chars} chars · fingerprint {row.fingerprint}", highlight=False
    )
    if row.title:
        console.print(f"heading path: {escape(str(row.title))}", highlight=False)
    console.print()
    console.print(row.text, markup=False, highlight=False)


@corpus.command("search")
@click.argument("query")
@click.option("-k", "--top", "k", default=10, show_default=True, type=click.IntRange(min=1), help="How many hits.")
@click.option(
    "--mode",
    type=click.Choice(["auto", "hybrid", "bm25", "dense"]),
    default="auto",
    show_default=True,
    help="hybrid = BM25 + dense fused with RRF; auto = hybrid, or bm25 when the embedder cannot read the language.",
)
@click.option(
    "--embedding",
    help="Embedding model for dense/hybrid: a local folder or a packaged model "
    "(default: m3e-small for Chinese when installed, else all-MiniLM-L6-v2).",
)
@click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (rank, id, doc_id, title, score, snippet).")
@click.pass_context
def corpus_search(ctx, query, k, mode, embedding, corpus_path, as_json):
    """Passages that match QUERY (Chinese or English), best first, with the sentence that matched.

    Use it to find the GT passage IDs of a golden item. The dense index is built
    once per corpus and embedding model, then cached.
    """
    from ragtrack import report as view
    from ragtrack.api import search_passages

    mode, hits = search_passages(
        query, root=ctx.obj["root"], corpus_path=corpus_path, k=k, mode=mode, embedding=embedding, on_stage=stage
    )
    if as_json:
        echo_json([h.to_json() for h in hits])
    elif not hits:
        console.print("no passage matches")
    else:
        console.print(view.hits_table(hits, query, mode))
