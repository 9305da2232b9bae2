"""A new local store copied from a migrated template, instead of migrated from scratch every time.

MLflow sets a SQLite store up the first time a client meets an empty file: it
creates the initial schema and runs every alembic migration since
(:func:`mlflow.store.db.utils._initialize_tables`), 1.2–2.5 CPU-seconds each
time — for each new project, each fresh clone, each test. What that leaves in
the file depends on the installed MLflow (its migration scripts) and SQLite,
not on the file's path or the project, so ragtrack lets MLflow do it once per
MLflow version, into a template in the user's cache
(``~/.cache/ragtrack/mlflow-stores``, or under ``$XDG_CACHE_HOME``), and
copies that template to each new store.

Only where it is safe:

* a local SQLite store that does not exist yet or is empty, under the store's
  set-up lock (:func:`ragtrack.tracking.store.setup_lock`); remote, PostgreSQL
  and other database stores are set up by MLflow as before;
* a template named for the MLflow version, the migration head and the SQLite
  version, and checked before each copy: intact, and at the head this MLflow
  expects (the check MLflow's own ``_verify_schema`` makes on every open);
* tables only: the default experiment, whose artifact location depends on the
  store, is created by MLflow on the copy as on any new file;
* written through a temporary file and a rename (the template and the copy),
  so a crash leaves either nothing or a whole file (an empty store file stays
  empty, and the next command sets it up).

Anything unexpected — a private MLflow function renamed in a later release, a
cache folder that cannot be written — and MLflow creates the store itself, as
it always did. The template is safe to delete at any time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
from pathlib import Path

from ragtrack.files import atomic_write_bytes

log = logging.getLogger(__name__)


def template_folder() -> Path:
    """Where templates are kept: the user's cache, shared by every project of the machine."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragtrack" / "mlflow-stores"


def from_template(database: Path) -> bool:
    """Make the new, empty SQLite store ``database`` a copy of the template for the installed MLflow;
    False (nothing done) when it already holds anything or no template can be had: MLflow then sets
    it up itself. Call under the store's set-up lock."""
    try:
        if database.exists() and database.stat().st_size > 0:
            return False
        template = _template()
        atomic_write_bytes(database, template.read_bytes())  # keeps the mode of the empty file it replaces
    except Exception as e:  # any surprise: MLflow's own set-up, as before (what went wrong is in the log)
        log.info("the new store %s is set up by MLflow's migrations (no template: %s)", database, e)
        return False
    return True


def _template() -> Path:
    import mlflow
    from mlflow.store.db.utils import _get_latest_schema_revision

    head = _get_latest_schema_revision()
    path = template_folder() / f"mlflow-{mlflow.__version__}-{head}-sqlite{sqlite3.sqlite_version}.db"
    if not (path.is_file() and _at_head(path, head)):
        _build(path)
        if not _at_head(path, head):
            raise RuntimeError(f"the template {path} is not at migration head {head}")
    return path


def _build(path: Path) -> None:
    """MLflow's own set-up of an empty SQLite file, into a temporary file renamed to ``path``."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _at_head(path: Path, head: str) -> bool:
    """Whether the file at ``path`` is an intact SQLite database whose migrations reached ``head``."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            intact = db.execute("PRAGMA quick_check").fetchone() == ("ok",)
            return intact and db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
    except sqlite3.Error:
        return False
