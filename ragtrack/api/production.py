"""Production logs: pull an app's conversations into the project's ``<experiment>-production`` experiment.

    from ragtrack.api import pull_logs
    report = pull_logs("dify", version="dify-app")
    print(report.new, report.unresolved)

Each answered question becomes one MLflow trace (see :mod:`ragtrack.tracking.production`); pulling
again stores only what is new and re-rates what users re-rated. Two things stay outside the store,
under ``.ragtrack/production/`` of the project: the cursor of each source/app (where the next pull
starts; losing it costs requests, never duplicates) and the secret that end-user identifiers are
hashed with (``user-hash-secret``, made on the first pull; ``RAGTRACK_USER_HASH_SECRET`` overrides it,
so that several machines pulling into one team store hash users alike).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from ragtrack.config import ProjectConfig, load_config
from ragtrack.production.pull import PullReport

#: Environment variable that, when set, is the secret end users are hashed with (instead of the file).
USER_HASH_SECRET_ENV = "RAGTRACK_USER_HASH_SECRET"
PRODUCTION_DIR = ".ragtrack/production"


def pull_logs(
    kind: str,
    *,
    version: str | None = None,
    path: str | Path | None = None,
    experiment: str | None = None,
    source_uri: str | None = None,
    app: str | None = None,
    corpus: str | Path | None = None,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> PullReport:
    """Pull one app's production conversations from ``kind`` (``dify``, ``ragflow``, ``mlflow``, ``jsonl``).

    ``version``: the version spec (``pipelines/<version>.toml``) of the Dify or RAGFlow app, whose
    base URL and key environment variable are used as ``eval`` uses them; with ``mlflow``, a Dify
    spec joins the ratings of ``/app/feedbacks`` to Dify's traces. ``path``: the JSONL export.
    ``experiment``: the MLflow experiment (name or ID) holding the app's traces, on ``source_uri``
    (default: the project's store). ``app``: the label stored messages carry (default: the version's
    name, the experiment's, or each JSONL record's ``app_version``). Contexts are mapped to the
    passages of ``corpus`` (default: the project's), through its ID table when it has one.
    """
    from ragtrack.agents.mapping import ContextMapper, IdTable, id_table_path
    from ragtrack.production.pull import pull
    from ragtrack.production.sources import LOG_SOURCES, SourceRequest
    from ragtrack.tracking.production import ProductionLog
    from ragtrack.tracking.store import open_store

    config = load_config(root)
    opener = LOG_SOURCES.get(kind)
    # The source checks what it was given (a JSONL file is read whole) before the store is opened:
    # bad input writes nothing.
    request = SourceRequest(
        config, version, str(path) if path else None, experiment, source_uri, app, tracking_uri=tracking_uri
    )
    source = opener(request)
    corpus_ = config.load_corpus(corpus)
    mapper = ContextMapper(corpus_, config.eval.min_overlap, IdTable.load(id_table_path(corpus_.source), corpus_))
    log = ProductionLog(open_store(config, tracking_uri))
    return pull(source, log, mapper, user_hash_secret(config), cursor_path(config, source.name, source.app), progress)


def user_hash_secret(config: ProjectConfig) -> str:
    """The project's secret for hashing end users: ``$RAGTRACK_USER_HASH_SECRET``, else
    ``.ragtrack/production/user-hash-secret`` (created on first use, readable by its owner only)."""
    if value := os.environ.get(USER_HASH_SECRET_ENV):
        return value
    path = config.path(PRODUCTION_DIR) / "user-hash-secret"
    if path.is_file():
        return path.read_text("utf-8").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another pull made it a moment ago
        return path.read_text("utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    return value


def cursor_path(config: ProjectConfig, source: str, app: str) -> Path:
    """Where the cursor of one source/app lives: ``.ragtrack/production/cursors/<source>-<app>.json``."""
    return config.path(PRODUCTION_DIR) / "cursors" / f"{source}-{re.sub(r'[^A-Za-z0-9._-]+', '_', app)}.json"
