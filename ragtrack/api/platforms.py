"""Platforms: import a Dify or RAGFlow knowledge base as a local corpus with its ID table."""

from __future__ import annotations

import os
from pathlib import Path

from ragtrack.agents.base import check_url
from ragtrack.agents.importer import PLATFORMS, ImportReport, write_corpus
from ragtrack.config import load_config
from ragtrack.errors import RagtrackError
from ragtrack.secrets import declare, env_name


def import_corpus(
    platform: str,
    *,
    base_url: str,
    api_key_env: str,
    datasets: list[str],
    out: str | Path | None = None,
    root: str | Path = ".",
) -> ImportReport:
    """Pull every document and segment of the named knowledge bases (IDs or names) into a corpus JSONL
    (default ``golden/<platform>-kb.jsonl``) and its ID table beside it; report what changed.

    ``api_key_env`` names the environment variable holding the key (Dify: a
    knowledge-base key, ``dataset-…``; RAGFlow: the API key).
    """
    if platform == "coze":  # an agent kind, but nothing to import: a bot's recalled slices carry no IDs
        raise RagtrackError(
            "Coze lists no segment IDs to import: evaluate a Coze bot on your own corpus (its slices are mapped "
            "to passages by their text); see README.md, 'A Coze bot'"
        )
    fetch = PLATFORMS.get(platform)
    try:
        base_url = check_url(base_url).rstrip("/")
    except ValueError as e:
        raise RagtrackError(f"--base-url: {e}") from None
    try:
        declare(env_name(api_key_env))
    except ValueError as e:  # often the key itself, pasted in the wrong place: not echoed
        raise RagtrackError(f"--api-key-env {e}") from None
    key = os.environ.get(api_key_env)
    if not key:
        raise RagtrackError(f"environment variable {api_key_env} is not set (it holds the {platform} API key)")
    config = load_config(root)
    documents = fetch(base_url, key, list(datasets), config.eval.timeout_s)
    return write_corpus(documents, config.path(str(out or f"golden/{platform}-kb.jsonl")), platform, base_url)
