"""A new local store is a copy of a template MLflow migrated once, and exactly what MLflow makes itself."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from mlflow import MlflowClient

from ragtrack.config import load_config
from ragtrack.tracking.store import open_store
from ragtrack.tracking.store_template import from_template, template_folder


def schema(path) -> tuple[list, list]:
    """Every table, index and trigger as SQLite keeps its SQL, and the migration the file is at. A table's
    lines are compared as a set: MLflow's batch migrations rebuild a table with its constraints in an
    order that differs from one creation to the next (seen for ``runs``), the same table all the same."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        sql = sorted("\n".join(sorted(line.strip().rstrip(",") for line in (r[0] or "").splitlines())) for r in rows)
        return sql, db.execute("SELECT version_num FROM alembic_version").fetchall()


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return tmp_path / "user-cache" / "ragtrack" / "mlflow-stores"


def test_a_new_store_is_the_template_and_the_same_as_mlflow_makes_it(project, tmp_path, user_cache):
    store = open_store(load_config(project))
    [template] = user_cache.glob("mlflow-*.db")
    assert template_folder() == user_cache and not list(user_cache.glob(".*"))  # no temporary file left
    database = project / "mlruns" / "mlflow.db"
    reference = tmp_path / "by-mlflow" / "mlflow.db"  # MLflow's own set-up: every migration
    reference.parent.mkdir()
    MlflowClient(f"sqlite:///{reference}").search_experiments()
    assert schema(database) == schema(reference) == schema(template)
    names = {e.name: e.artifact_location for e in store.client.search_experiments()}
    assert set(names) == {"Default", "ragtrack", "ragtrack-decisions"}  # made by MLflow on the copy
    with closing(sqlite3.connect(template)) as db:
        assert db.execute("SELECT count(*) FROM experiments").fetchone() == (0,), "tables only, nothing of a store"

    built = template.stat().st_mtime_ns
    other = tmp_path / "other" / "mlflow.db"
    assert from_template(other) and template.stat().st_mtime_ns == built  # copied, not built again
    assert not from_template(database), "a store with anything in it is never replaced"


def test_a_damaged_template_is_built_again_and_an_unwritable_cache_leaves_the_set_up_to_mlflow(
    project, tmp_path, user_cache, monkeypatch
):
    assert from_template(tmp_path / "a.db")
    [template] = user_cache.glob("mlflow-*.db")
    template.write_bytes(b"half a file" * 100)  # a disk that filled up, a copy cut short
    assert from_template(tmp_path / "b.db") and schema(tmp_path / "b.db") == schema(tmp_path / "a.db")

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache cannot be created
    assert not from_template(tmp_path / "c.db")
    store = open_store(load_config(project))  # MLflow migrates it itself, as before
    assert schema(project / "mlruns" / "mlflow.db") == schema(tmp_path / "a.db")
    assert store.client.get_experiment_by_name("ragtrack") is not None
