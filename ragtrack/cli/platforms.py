"""``ragtrack corpus import dify|ragflow``: a platform's knowledge base as a local corpus and ID table."""

from __future__ import annotations

import click

from ragtrack.cli import console
from ragtrack.cli.corpus import corpus


@corpus.command("import")
@click.argument("platform", metavar="dify|ragflow")
@click.option(
    "--base-url", required=True, help="Dify: the API base, e.g. http://localhost/v1; RAGFlow: http://host:9380."
)
@click.option(
    "--api-key-env",
    required=True,
    help="Environment variable holding the key (Dify: a knowledge-base key, dataset-…; RAGFlow: the API key).",
)
@click.option("--dataset", "datasets", multiple=True, required=True, help="Knowledge base ID or name (repeatable).")
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Corpus JSONL to write [default: golden/<platform>-kb.jsonl]."
)
@click.pass_context
def corpus_import(ctx, platform, base_url, api_key_env, datasets, out):
    """Pull a knowledge base's documents and segments into a corpus JSONL (one passage per segment,
    ID <document>#<position>) and the ID table beside it (platform segment ID → passage ID), so the
    golden set names what the platform really indexed and an app's contexts map exactly.
    Importing again reports the passages added, removed or changed."""
    from ragtrack import report as view
    from ragtrack.api import import_corpus

    result = import_corpus(
        platform, base_url=base_url, api_key_env=api_key_env, datasets=list(datasets), out=out, root=ctx.obj["root"]
    )
    for line in view.import_lines(result):
        console.print(line, highlight=False)
