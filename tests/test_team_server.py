"""A team MLflow server: PostgreSQL behind ``mlflow server`` on 127.0.0.1, used through ``--tracking-uri http://…``.

Runs when ``RAGTRACK_TEST_POSTGRES`` names a PostgreSQL server ragtrack may create databases on
(``postgresql+psycopg2://user:password@127.0.0.1:5432/postgres``); ``.ci/run`` installs
PostgreSQL from Debian's packages, starts it and sets the variable, so CI always runs these.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import make_project, mlflow_process

# A PostgreSQL database, an `mlflow server` and four `ragtrack eval` processes at once.
pytestmark = pytest.mark.slow

SERVER = os.environ.get("RAGTRACK_TEST_POSTGRES")
if not SERVER:
    pytest.skip("RAGTRACK_TEST_POSTGRES is not set (.ci/run sets it)", allow_module_level=True)


def _admin(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(SERVER.replace("+psycopg2", ""))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(sql)
    conn.close()


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    """A fresh database and an ``mlflow server`` on it, serving artifacts itself."""
    database = f"ragtrack_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {database}")
    backend = SERVER.rsplit("/", 1)[0] + f"/{database}"
    artifacts = tmp_path_factory.mktemp("team-artifacts")
    with mlflow_process(
        "server", "--backend-store-uri", backend, "--artifacts-destination", str(artifacts), timeout=180
    ) as uri:
        yield uri
    _admin(f"DROP DATABASE {database} WITH (FORCE)")


def ragtrack(root: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.Popen(
        [sys.executable, "-m", "ragtrack.cli", "--root", str(root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def finished(*procs: subprocess.Popen) -> list[tuple[int, str]]:
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    return [(p.returncode, out) for p, out in zip(procs, outputs, strict=True)]


@pytest.fixture(scope="module")
def four_evals(team_server, tmp_path_factory):
    """v1–v4 evaluated at once, by four processes with separate project folders, into one server."""
    roots = [make_project(tmp_path_factory.mktemp(f"member{n}") / "project") for n in range(4)]
    procs = [
        ragtrack(root, "eval", "--version", f"v{n + 1}", "--tracking-uri", team_server) for n, root in enumerate(roots)
    ]
    results = finished(*procs)
    assert all(code == 0 for code, _ in results), [out[-1500:] for code, out in results if code]
    return roots


def test_four_concurrent_evals_land_with_the_same_figures_as_sqlite(team_server, four_evals):
    from mlflow import MlflowClient

    from ragtrack.api import evaluate

    client = MlflowClient(team_server, registry_uri=team_server)
    experiment = client.get_experiment_by_name("ragtrack")
    runs = client.search_runs([experiment.experiment_id], "tags.`ragtrack.kind` = 'eval'")
    assert sorted(r.data.tags["ragtrack.version"] for r in runs) == ["v1", "v2", "v3", "v4"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len({mv.version for mv in client.search_model_versions("name='rag-agent'")}) == 4

    local = make_project(four_evals[0].parent.parent / "sqlite" / "project")
    v1_sqlite = evaluate("v1", root=local)
    v1_team = next(r for r in runs if r.data.tags["ragtrack.version"] == "v1")
    for name in ("context_recall", "mrr", "correctness", "groundedness"):
        assert v1_team.data.metrics[name] == pytest.approx(v1_sqlite.metrics[name]), name
    # Each item's trace reached the server with its assessments (sent inside the trace's own write).
    found = client.search_traces(locations=[experiment.experiment_id], run_id=v1_team.info.run_id, max_results=100)
    assert len(found) == len(v1_sqlite.records)
    names = {a.name for a in found[0].info.assessments}
    assert {"expected_response", "judge/correctness", "judge/groundedness", "retrieval/context_recall"} <= names

    compare = ragtrack(four_evals[0], "compare", "v1", "v3", "--tracking-uri", team_server, "--markdown", "-")
    code, out = finished(compare)[0]
    assert code == 0 and "v1 vs v3" in out, out
    assert f"]({team_server.rstrip('/')}/#/runs/" in out, out  # Markdown for a PR: links to the server


def test_two_promotions_at_once_from_two_machines_never_beat_the_same_champion(team_server, four_evals):
    from mlflow import MlflowClient

    first = finished(ragtrack(four_evals[0], "promote", "v1", "--tracking-uri", team_server))[0]
    assert first[0] == 0, first[1]
    # A margin of -10 makes every challenger "win": only the lock keeps both from beating v1.
    loose = ("--margin", "-10", "--tolerance", "10", "--allow-substitutes", "--allow-partial")
    results = finished(
        ragtrack(four_evals[1], "promote", "v2", *loose, "--tracking-uri", team_server),
        ragtrack(four_evals[2], "promote", "v3", *loose, "--tracking-uri", team_server),
    )
    assert all(code == 0 for code, _ in results), results  # both promoted, one after the other
    client = MlflowClient(team_server, registry_uri=team_server)
    decisions = client.search_runs(
        [client.get_experiment_by_name("ragtrack-decisions").experiment_id],
        "tags.`ragtrack.kind` = 'promotion' and tags.`ragtrack.outcome` = 'promoted'",
    )
    beaten = [r.data.params["champion"] for r in decisions if r.data.params["version"] in ("v2", "v3")]
    assert sorted(beaten) in (["v1", "v2"], ["v1", "v3"]), beaten  # the second one beat the first, not v1
    last = next(r for r in decisions if r.data.params["champion"] != "v1").data.params["version"]
    assert client.get_model_version_by_alias("rag-agent", "champion").tags["ragtrack.version"] == last
    assert not client.search_registered_models("name LIKE '%promotion-lock'"), "the registry lock was released"


def test_the_registry_lock_excludes_a_second_holder_until_released(team_server):
    from ragtrack.config import load_config

    from .test_promotion import assert_lock_is_exclusive

    assert_lock_is_exclusive(load_config(Path(".")), team_server)


def test_evals_starting_together_all_link_the_one_golden_dataset(team_server, tmp_path):
    """MLflow creates a run's dataset input by look-up-then-insert: runs logging the same new dataset at
    once collide on its unique key (it failed one of the four concurrent evals in CI). Eight runs here
    log one new dataset at the same instant, through the store port's retry; without the retry this
    test failed in 2 of 3 tries here."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.entities import DatasetInput

    from ragtrack.config import ProjectConfig
    from ragtrack.tracking.store import open_store

    store = open_store(ProjectConfig(root=tmp_path), team_server)
    runs = [store.client.create_run(store.experiment_id).info.run_id for _ in range(8)]
    digest = uuid.uuid4().hex[:8]  # a dataset this server has never seen
    golden = MetaDataset(LocalArtifactDatasetSource(str(tmp_path / "golden.jsonl")), name="golden", digest=digest)
    start = threading.Barrier(len(runs))

    def link(run_id: str) -> None:
        start.wait()
        store.log_dataset_input(run_id, DatasetInput(golden._to_mlflow_entity()))

    with ThreadPoolExecutor(len(runs)) as pool:
        list(pool.map(link, runs))  # raises if any run failed to link it
    linked = {store.client.get_run(r).inputs.dataset_inputs[0].dataset.digest for r in runs}
    assert linked == {digest}


def test_a_database_that_refuses_the_login_or_lacks_the_database_is_one_line_within_seconds(tmp_path):
    """The port answered, so only MLflow's connection retries noticed: 1 min 44 s and a traceback."""
    from urllib.parse import urlsplit

    parts = urlsplit(SERVER)
    wrong_password = SERVER.replace(f":{parts.password}@", ":not-the-password-1234@")
    no_database = SERVER.rsplit("/", 1)[0] + "/ragtrack_no_such_database"
    root = make_project(tmp_path / "p")
    for uri, reason in [(wrong_password, "password authentication failed"), (no_database, "does not exist")]:
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "ragtrack.cli", "--root", str(root), "versions", "--tracking-uri", uri],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 2 and "refused the connection" in out.stderr and reason in out.stderr, out.stderr
        assert "not-the-password" not in out.stderr + out.stdout and "Traceback" not in out.stderr
        assert time.monotonic() - started < 30


def test_two_evals_started_together_on_a_fresh_database_both_finish(tmp_path):
    """Both found the database empty and had MLflow create its tables: one failed on PostgreSQL's catalog
    (UniqueViolation … pg_type_typname_nsp_index / pg_class_relname_nsp_index) in 3 of 3 tries without
    the set-up's advisory lock. Two processes, two project folders, one new database."""
    from mlflow import MlflowClient

    database = f"ragtrack_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {database}")
    uri = SERVER.rsplit("/", 1)[0] + f"/{database}"
    try:
        roots = [make_project(tmp_path / f"member{n}" / "project") for n in range(2)]
        results = finished(*(ragtrack(root, "eval", "v1", "--limit", "1", "--tracking-uri", uri) for root in roots))
        assert [code for code, _ in results] == [0, 0], [out[-1500:] for _, out in results]
        client = MlflowClient(uri, registry_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name("ragtrack").experiment_id])
        assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    finally:
        _admin(f"DROP DATABASE {database} WITH (FORCE)")


def test_evals_starting_together_on_a_team_server_register_their_version_once(team_server, tmp_path):
    """Each process found no model version of the spec and registered its own (the local store's
    file lock cannot reach other machines): three processes, one registry version."""
    from mlflow import MlflowClient

    from .test_hardening import OPEN_AND_REGISTER

    root = make_project(tmp_path / "project")
    model = f"race-{uuid.uuid4().hex[:8]}"
    (root / "ragtrack.toml").write_text(f'[project]\nregistered_model = "{model}"\n')
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    command = [sys.executable, "-c", OPEN_AND_REGISTER, str(root), team_server]
    procs = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    versions = MlflowClient(team_server, registry_uri=team_server).search_model_versions(f"name = '{model}'")
    assert len(versions) == 1, [v.version for v in versions]


def test_a_database_store_in_ragtrack_toml_keeps_artifacts_in_the_project_wherever_the_command_runs(
    tmp_path, monkeypatch
):
    """The experiment took MLflow's default, ./mlruns of the folder the first call ran in (a notebook's)."""
    from ragtrack.config import load_config
    from ragtrack.tracking.store import open_store

    database = f"ragtrack_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {database}")
    try:
        root = make_project(tmp_path / "project")
        (root / "ragtrack.toml").write_text(f'[project]\ntracking_uri = "{SERVER.rsplit("/", 1)[0]}/{database}"\n')
        (tmp_path / "notebooks").mkdir()
        monkeypatch.chdir(tmp_path / "notebooks")
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        store = open_store(load_config(root))
        for experiment in (store.experiment_id, store.decisions_experiment_id):
            location = store.client.get_experiment(experiment).artifact_location
            assert location == (root / "mlruns" / "artifacts").resolve().as_uri(), location
        assert not (tmp_path / "notebooks" / "mlruns").exists()
    finally:
        _admin(f"DROP DATABASE {database} WITH (FORCE)")
