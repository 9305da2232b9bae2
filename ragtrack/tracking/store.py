"""The store port: everything ragtrack asks of an MLflow tracking store and model registry.

One module owns every tag and param name ragtrack writes, the tracking-URI
rules, paged run searches, reading and moving the ``champion`` alias and the
promotion lock. The rest of ragtrack asks this module, and spells no tag.

Where runs go: ``mlruns/mlflow.db`` (SQLite; MLflow 3 no longer takes the old
file store) with artifacts in ``mlruns/artifacts``, both under the project
root and git-ignored, unless ``--tracking-uri`` beats ``MLFLOW_TRACKING_URI``
beats ``ragtrack.toml``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import mlflow
from mlflow import MlflowClient
from mlflow.entities import DatasetInput, Metric, RunTag
from mlflow.entities import Param as MlflowParam
from mlflow.exceptions import MlflowException
from sqlalchemy.exc import SQLAlchemyError

from ragtrack.config import ProjectConfig
from ragtrack.errors import RagtrackError, StoreError
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.promotion import ALIAS
from ragtrack.records import ItemRecord, RunSummary, substitutions
from ragtrack.secrets import redact, redact_values, without_credentials
from ragtrack.tracking.export_failures import cause
from ragtrack.tracking.store_template import from_template

#: What each registry-side lock (:meth:`Store.registry_lock`) serialises, as its holder's description says.
REGISTRY_LOCKS = {
    "promotion": "Held by `ragtrack promote` while it decides",
    "registration": "Held by `ragtrack eval` while it registers a new agent version",
}


class Tag:
    """Every tag ragtrack writes on runs, traces, logged models and model versions."""

    NOTE = "mlflow.note.content"  # MLflow's own: the Markdown description of a run or logged model
    RUN_TYPE = "mlflow.runType"  # MLflow's own: "genai_evaluate" lists a run under "Evaluation runs"
    MODEL_VERSIONS = "mlflow.modelVersions"  # MLflow's own: a LoggedModel's registry versions (JSON list)
    KIND = "ragtrack.kind"  # eval | compare | promotion | calibration | alignment
    VERSION = "ragtrack.version"
    AGENT_KIND = "ragtrack.agent_kind"
    SPEC_HASH = "ragtrack.spec_hash"
    DESCRIPTION = "ragtrack.description"
    GOLDEN_DIGEST = "ragtrack.golden_digest"
    JUDGE_IDENTITY = "ragtrack.judge_identity"
    JUDGE_ALIGNED = "ragtrack.judge_aligned"  # eval and alignment runs: the aligned judge's digest, or "none"
    SUBSTITUTED = "ragtrack.substituted"
    MODEL_VERSION = "ragtrack.model_version"
    MODEL_ID = "ragtrack.model_id"
    COMPLETE = "ragtrack.complete"
    LIMITED = "ragtrack.limited"  # eval runs of a --limit cut: "4 of 16" golden items
    VERSIONS = "ragtrack.versions"  # compare runs: "a,b"
    OUTCOME = "ragtrack.outcome"  # promotion runs: promoted | refused | unchanged (already the champion)
    DRY_RUN = "ragtrack.dry_run"
    DECISION_STATE = "ragtrack.decision_state"  # promotion runs: see DecisionState
    DECISION = "ragtrack.decision"  # model versions: the last decision about them
    DECISION_RUN = "ragtrack.decision_run"
    LAST_CHALLENGE = "ragtrack.last_challenge"  # the champion's model version: who challenged it
    LOCK_HOLDER = "ragtrack.lock_holder"  # the promotion lock: host:pid holding it
    LOCK_PROCESS = "ragtrack.lock_process"  # host, pid namespace and pid: a holder this machine can see died
    ENGINE = "ragtrack.engine"  # eval runs: where the items were answered and judged ("local", "spark:local[2]")
    GIT_DIRTY = "ragtrack.git_dirty"  # eval runs: the checkout had uncommitted changes (beside mlflow.source.git.*)
    COMPARED_TO = "ragtrack.compared_to"  # eval runs: the champion model version its delta/* metrics are against
    COMPARED_RUN = "ragtrack.compared_run"  # eval runs: that champion's eval run
    STANDING = "ragtrack.standing"  # eval runs: the champion model version the description was written against
    OVERRIDES = "ragtrack.overrides"  # promotion runs: the --allow-* flags and rule changes that applied, or "none"
    ITEM_ID = "ragtrack.item_id"  # traces: the golden item
    ITEM_TYPE = "ragtrack.item_type"  # traces: its question type
    RECORD = "ragtrack.record"  # traces: the digest of the item record the trace shows
    WARNING_PREFIX = "ragtrack.warning."  # eval runs: one tag per agent warning (language_mismatch, ...)
    # Production traces (one per pulled message; see ragtrack.tracking.production):
    PRODUCTION_SOURCE = "ragtrack.production.source"  # dify | ragflow | mlflow | jsonl
    PRODUCTION_APP = "ragtrack.production.app"  # the app / version that served it
    PRODUCTION_MESSAGE = "ragtrack.production.message_id"  # the platform's message ID
    PRODUCTION_USER = "ragtrack.production.user"  # the end user, hashed
    PRODUCTION_CONVERSATION = "ragtrack.production.conversation_id"
    PRODUCTION_CREATED = "ragtrack.production.created_at"  # ISO 8601, UTC (also the trace's start)
    PRODUCTION_COVERAGE = "ragtrack.production.coverage"  # all | rated_conversations
    # Monitor runs (one per app version and day; see ragtrack.tracking.monitoring):
    MONITOR_APP = "ragtrack.monitor.app"
    MONITOR_DAY = "ragtrack.monitor.day"  # YYYY-MM-DD, UTC
    MONITOR_DIGEST = "ragtrack.monitor.digest"  # of the window's messages and ratings
    MONITOR_ALARM = "ragtrack.monitor.alarm"  # true when a metric dropped against the previous day

    #: The value of a tag that names nothing ("no champion", "no override"): an empty tag value is
    #: not shown by the UI's tag tables, which then render a name with no value.
    NONE = "none"
    #: How long a tag written for reading in the registry's tag table may be: longer values wrap
    #: into a row taller than the table's box, which then clips it.
    HEADLINE_CHARS = 80

    @staticmethod
    def headline(text: str) -> str:
        """``text``'s first line, cut to :data:`HEADLINE_CHARS` (saying so with an ellipsis)."""
        line = text.strip().split("\n", 1)[0]
        return line if len(line) <= Tag.HEADLINE_CHARS else line[: Tag.HEADLINE_CHARS - 1].rstrip() + "…"

    @staticmethod
    def warning(code: str) -> str:
        """The tag of one agent warning: ``ragtrack.warning.language_mismatch``."""
        return Tag.WARNING_PREFIX + code


class DecisionState:
    """Where a promotion run is in :data:`ragtrack.tracking.promotion.STEPS` (``ragtrack.decision_state``)."""

    WRITING = "writing"  # the run is being written: nothing it decides has been applied
    PENDING = "pending"  # the decision is recorded in full; applying it to the registry has begun
    DONE = "done"  # applied: alias, tags, descriptions
    ABANDONED = "abandoned"  # cut short before its decision was recorded (or overtaken): nothing applied


#: The run type MLflow's UI lists under "Evaluation runs" and opens on its evaluation view.
GENAI_EVALUATE = "genai_evaluate"
#: Saved views of an experiment's runs table are experiment tags with this prefix (MLflow's UI "Views" menu).
SAVED_VIEW = "mlflow.sharedViewState."
#: MLflow keeps run tags (descriptions included) up to this many characters; registry descriptions up to 5000.
MAX_NOTE = 8000
MAX_REGISTRY_NOTE = 5000


class Param:
    """Params that ragtrack reads back."""

    MIN_OVERLAP = "mapping_min_overlap"
    RANK_CUTOFF = "rank_cutoff"  # k of the rank metrics (nDCG, all-hops): the agent's top_k, or "contexts"


# Stores ragtrack can work with (MLflow's own list, minus Databricks-hosted ones it has no way to test).
SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
PROBE_TIMEOUT_S = 5.0
PROBE_ATTEMPTS = 2


def check_store(uri: str, *, writing: bool = True) -> None:
    """Fail fast, in one line, when the store is of an unsupported kind or does not answer.

    MLflow itself retries an unreachable server for minutes before raising (and a
    SQLite file it cannot open for as long); a short probe answers the question "is
    it there" before any work is done — for a local store ``writing``, also whether
    it takes writes.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in SCHEMES:
        raise StoreError(
            f"unsupported tracking URI {without_credentials(uri)!r}: use sqlite:///path/mlflow.db, "
            "http(s)://server:port "
            "(an MLflow tracking server) or a database URI such as postgresql+psycopg2://user@host/db"
        )
    if scheme == "sqlite":
        folder = Path(uri.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store folder {folder}: {e.strerror or e}") from None
        _probe_sqlite(Path(uri.removeprefix("sqlite:///")), writing)
        return
    last = ""
    for attempt in range(PROBE_ATTEMPTS):
        try:
            return _probe(uri, parts, scheme)
        except OSError as e:
            last = str(e) or type(e).__name__
        if attempt + 1 < PROBE_ATTEMPTS:
            time.sleep(1.0)
    raise StoreError(
        f"the tracking store {without_credentials(uri)} does not answer ({last}); "
        "start it, or pass another --tracking-uri"
    )


def _probe(uri: str, parts, scheme: str) -> None:
    """One short look at a remote store; raises OSError when it does not answer."""
    if scheme in ("http", "https"):
        import httpx

        try:
            response = httpx.get(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise OSError(f"{type(e).__name__}: {e}") from None
        if response.status_code in (200, 401, 403):  # 401/403: a server with access control, answering
            return
        if response.status_code >= 500:
            raise OSError(f"HTTP {response.status_code}")
        raise StoreError(
            f"{without_credentials(uri)} is not an MLflow tracking server "
            f"(GET /health answered HTTP {response.status_code})"
        )
    port = parts.port or {"postgresql": 5432, "mysql": 3306, "mssql": 1433}[scheme]
    with socket.create_connection((parts.hostname or "localhost", port), PROBE_TIMEOUT_S):
        pass
    _probe_database(uri, scheme)


def _probe_database(uri: str, scheme: str) -> None:
    """A database server that answers may still refuse the credentials or lack the database, which
    MLflow retries for minutes too: one real connection says so at once."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    timeout = {
        "postgresql": {"connect_timeout": int(PROBE_TIMEOUT_S)},
        "mysql": {"connect_timeout": int(PROBE_TIMEOUT_S)},
    }
    try:
        engine = sqlalchemy.create_engine(uri, poolclass=NullPool, connect_args=timeout.get(scheme, {}))
    except (ImportError, sqlalchemy.exc.NoSuchModuleError) as e:
        raise StoreError(f"no driver for {without_credentials(uri)}: {e} (pip install 'ragtrack[team]')") from None
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.OperationalError as e:
        reason = str(e.orig or e).strip().splitlines()[0] if str(e.orig or e).strip() else type(e).__name__
        raise StoreError(
            f"the tracking store {without_credentials(uri)} refused the connection: {redact(reason)}"
        ) from None
    finally:
        engine.dispose()


def default_tracking_uri(root: Path) -> str:
    return f"sqlite:///{(root / 'mlruns').resolve() / 'mlflow.db'}"


def database_in_use() -> Path | None:
    """The SQLite file of the store this process opened (None for another kind of store)."""
    return local_database(mlflow.get_tracking_uri())


def local_database(uri: str) -> Path | None:
    """The SQLite file of a local store, or None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def artifact_root(uri: str, root: str | Path) -> str | None:
    """Where a new experiment keeps its artifacts when the store itself does not say (MLflow's default
    is ``./mlruns`` of whatever folder the first command ran in): a local SQLite store's beside its
    database; a database reached directly (PostgreSQL, MySQL) the project's ``mlruns/artifacts``.
    A tracking server decides for itself (None)."""
    if db := local_database(uri):
        return (db.parent / "artifacts").resolve().as_uri()
    if server_ui(uri) is None and "://" in uri and not uri.startswith(("file:", "databricks")):
        return (Path(root) / "mlruns" / "artifacts").resolve().as_uri()
    return None


# mlflow.set_tracking_uri() also exports MLFLOW_TRACKING_URI; remember what we exported, so that
# a later call for another project is not mistaken for the user's own setting, and what the user
# had set there, so that it still counts once ours replaced it.
_exported: str | None = None
_users: str | None = None


def resolve_tracking_uri(config: ProjectConfig, override: str | None = None) -> str:
    from_env = os.environ.get("MLFLOW_TRACKING_URI")
    if from_env == _exported:
        from_env = _users
    return (
        override
        or from_env
        or _from_root(config.project.tracking_uri, config.root)
        or default_tracking_uri(config.root)
    )


def server_ui(tracking_uri: str) -> str | None:
    """A tracking server's URL, where its UI is served (None for a local store, which ``mlflow ui`` serves)."""
    return without_credentials(tracking_uri) if tracking_uri.startswith(("http://", "https://")) else None


def _from_root(uri: str | None, root: Path) -> str | None:
    """A relative ``sqlite:///`` path written in ``ragtrack.toml`` names a file of the project, as
    its other paths do: resolved against the root, not the folder a command runs in."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(root / uri.removeprefix('sqlite:///')).resolve()}"
    return uri


@dataclass(frozen=True)
class Store:
    tracking_uri: str
    experiment_id: str  # eval runs: every version side by side under the same metric names
    experiment_name: str
    registered_model: str
    client: MlflowClient
    decisions_experiment_id: str = ""  # comparison and promotion runs, kept out of the eval charts
    artifact_location: str | None = None  # of the experiments it creates (see :func:`artifact_root`)

    # ------------------------------------------------------------ experiments
    def side_experiment(self, suffix: str) -> str:
        """``<experiment>-<suffix>`` (created on first use), e.g. ``ragtrack-judges``."""
        return _experiment(self.client, f"{self.experiment_name}-{suffix}", self.artifact_location)

    def describe_experiment(self, markdown: str, experiment_id: str | None = None) -> None:
        """An experiment's description (default: the eval experiment's): the UI shows it at the top of
        every page of the experiment."""
        experiment = experiment_id or self.experiment_id
        _despite_racing_inserts(lambda: self.client.set_experiment_tag(experiment, Tag.NOTE, _clip(markdown, MAX_NOTE)))

    def save_runs_view(self, key: str, name: str, columns: list[str], experiment_id: str | None = None) -> str:
        """A saved view of an experiment's runs table (default: the eval experiment's) showing ``columns``
        in this order (``metrics.`x```, ``tags.`y```…).

        MLflow's UI lists it under "Views" and opens it at the route this returns.
        """
        experiment = experiment_id or self.experiment_id
        state = {"selectedColumns": columns, "columnOrder": columns, "orderByKey": "attributes.start_time"}
        now = int(time.time() * 1000)
        envelope = {"name": name, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
        _despite_racing_inserts(
            lambda: self.client.set_experiment_tag(experiment, SAVED_VIEW + key, json.dumps(envelope))
        )
        return f"#/experiments/{experiment}/runs?viewStateShareKey={key}"

    # ------------------------------------------------------------ writing runs
    def start_run(
        self,
        name: str,
        params: dict[str, str],
        tags: dict[str, str],
        run_id: str | None = None,
        experiment_id: str | None = None,
    ) -> str:
        """Create a run (or reopen ``run_id`` to resume it) and log its params and tags."""
        if run_id is not None:
            try:
                self.client.update_run(run_id, status="RUNNING")
            except MlflowException:  # the store was wiped since the checkpoint was written
                run_id = None
        # Redacted here, at the edge: a key pasted where a name belongs (``--judge openai:sk-…``) never lands.
        params, tags = _redacted(params), _redacted(tags)
        if run_id is None:
            run_id = self.client.create_run(experiment_id or self.experiment_id, run_name=name, tags=tags).info.run_id
        items = [(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # the store takes at most 100 params per batch
            self.client.log_batch(run_id, params=[MlflowParam(k, v) for k, v in items[i : i + 100]])
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        return run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], model_id: str | None = None) -> None:
        """One batched write (per-metric calls are ~50× slower on SQLite), in the dict's order; linked to the model.

        MLflow's run page and tables list metrics in the order they were first logged, and show a value
        as it was logged: each is rounded for reading (:func:`~ragtrack.evaluation.metrics.for_display`;
        decisions pair the items' own scores). Idempotent: a value the run already holds is not logged
        again, so a resumed run whose first attempt died while logging does not grow a second history
        point per metric.
        """
        held = self.client.get_run(run_id).data.metrics
        now = int(time.time() * 1000)
        shown = {k: m.for_display(v) for k, v in metrics.items()}
        rows = [Metric(k, v, now, 0, model_id=model_id) for k, v in shown.items() if held.get(k) != v]
        for i in range(0, len(rows), 1000):
            self.client.log_batch(run_id, metrics=rows[i : i + 1000])

    def log_json(self, run_id: str, name: str, payload: object) -> None:
        self.log_text(run_id, name, json.dumps(payload, indent=1, ensure_ascii=False, default=str))

    def log_text(self, run_id: str, name: str, text: str) -> None:
        self.client.log_text(run_id, text, name)

    def log_file(self, run_id: str, path: Path) -> None:
        self.client.log_artifact(run_id, str(path))

    def write_table(self, run_id: str, name: str, columns: dict[str, list]) -> None:
        """``columns`` as the MLflow table artifact ``name``, which the UI renders as a table, replacing
        one of that name (``MlflowClient.log_table`` appends to it: a re-described run's table would
        keep the rows of the champion it was compared with before)."""
        import pandas as pd
        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            pd.DataFrame(columns).to_json(path, orient="split", index=False, force_ascii=False)
            self.client.log_artifact(run_id, str(path))
        logged = json.loads(self.client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
        if (entry := {"path": name, "type": "table"}) not in logged:  # what tells the UI it is a table
            self.client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps([*logged, entry]))

    def tag_run(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in _redacted(tags).items()])

    def describe_run(self, run_id: str, markdown: str) -> None:
        """The run's description (its overview page renders it as Markdown)."""
        self.client.set_tag(run_id, Tag.NOTE, _clip(redact_values(markdown), MAX_NOTE))

    def description(self, run_id: str) -> str:
        return self.client.get_run(run_id).data.tags.get(Tag.NOTE, "")

    @property
    def ui_address(self) -> str | None:
        """Where a browser finds this store's UI: a tracking server's URL (None for a local store)."""
        return server_ui(self.tracking_uri)

    def finish_run(self, run_id: str, status: str = "FINISHED") -> None:
        """End a run: FINISHED (complete), KILLED (interrupted, resumable) or FAILED (an error)."""
        self.client.set_tag(run_id, Tag.COMPLETE, str(status == "FINISHED").lower())
        self.client.set_terminated(run_id, status)

    def run_status(self, run_id: str) -> str | None:
        """RUNNING, FINISHED, KILLED, FAILED — or None for a run the store does not know."""
        try:
            return self.client.get_run(run_id).info.status
        except MlflowException:
            return None

    def log_dataset_input(self, run_id: str, dataset_input: DatasetInput) -> None:
        """Link a dataset to the run, creating it in the experiment on first use."""
        _despite_racing_inserts(lambda: self.client.log_inputs(run_id, datasets=[dataset_input]))

    # ------------------------------------------------------------ reading runs
    def search_runs(self, experiment_ids: list[str], query: str, order_by: list[str] | None = None) -> Iterator:
        """Every matching run, page by page (MLflow returns at most 1000 a page)."""
        token = None
        while True:
            page = self.client.search_runs(
                experiment_ids, query, order_by=order_by or [], max_results=1000, page_token=token
            )
            yield from page
            token = page.token
            if not token:
                return

    def eval_runs(
        self,
        version: str | None = None,
        golden_digest: str | None = None,
        judge_identity: str | None = None,
        model_id: str | None = None,
        model_version: str | None = None,
    ) -> list[RunSummary]:
        """Complete eval runs, newest first, optionally filtered."""
        clauses = [f"tags.`{Tag.KIND}` = 'eval'", f"tags.`{Tag.COMPLETE}` = 'true'"]
        for tag, value in (
            (Tag.VERSION, version),
            (Tag.GOLDEN_DIGEST, golden_digest),
            (Tag.JUDGE_IDENTITY, judge_identity),
            (Tag.MODEL_ID, model_id),
            (Tag.MODEL_VERSION, model_version),
        ):
            if value:
                clauses.append(f"tags.`{tag}` = {quoted(value)}")
        found = self.search_runs([self.experiment_id], " and ".join(clauses), ["attributes.start_time DESC"])
        return [_summary(r) for r in found]

    def latest_eval(
        self,
        version: str,
        golden_digest: str | None = None,
        judge_identity: str | None = None,
        model_version: str | None = None,
    ) -> RunSummary:
        """The newest complete eval of ``version`` (of one registry version of it, ``model_version``: a
        version's spec edited in place is a new model version under the same name)."""
        found = self.eval_runs(version, golden_digest, judge_identity, model_version=model_version)
        if not found:
            detail = "".join(
                [
                    f" on golden digest {golden_digest}" if golden_digest else "",
                    f" with judge {judge_identity}" if judge_identity else "",
                ]
            )
            raise RagtrackError(f"no complete eval run of {version}{detail}; run: ragtrack eval --version {version}")
        return found[0]

    def read_text(self, run_id: str, name: str) -> str | None:
        """A text artifact of a run, or None when the run has no such artifact."""
        if name not in {f.path for f in self.client.list_artifacts(run_id)}:
            return None
        with tempfile.TemporaryDirectory() as tmp, without_progress_bar():
            return Path(self.client.download_artifacts(run_id, name, tmp)).read_text("utf-8")

    def run_summary(self, run_id: str) -> RunSummary:
        return _summary(self.client.get_run(run_id))

    def records(self, run_id: str) -> list[ItemRecord]:
        """The per-item records an eval run logged (``items.jsonl``)."""
        with tempfile.TemporaryDirectory() as tmp, without_progress_bar():
            try:
                path = self.client.download_artifacts(run_id, "items.jsonl", tmp)
            except MlflowException:  # its artifact folder was deleted or moved
                run = self.client.get_run(run_id)
                version = run.data.tags.get(Tag.VERSION, "?")
                raise StoreError(
                    f"the records of {version}'s eval run {run_id} (items.jsonl) are missing from "
                    f"{run.info.artifact_uri}: run `ragtrack eval --version {version} --fresh` to measure it again"
                ) from None
            lines = Path(path).read_text("utf-8").splitlines()
        return [ItemRecord.from_json(json.loads(line)) for line in lines if line]

    # ------------------------------------------------------------ registry
    def model_versions(self, version: str | None = None, spec_hash: str | None = None) -> list:
        """Registry versions of the project's model (of one agent version / spec hash), newest first."""
        query = f"name={quoted(self.registered_model)}"
        if version:
            query += f" and tags.`{Tag.VERSION}` = {quoted(version)}"
        if spec_hash:
            query += f" and tags.`{Tag.SPEC_HASH}` = {quoted(spec_hash)}"
        found, token = [], None
        try:
            while True:
                page = self.client.search_model_versions(query, max_results=1000, page_token=token)
                found.extend(page)
                token = page.token
                if not token:
                    break
        except MlflowException:
            return []  # no registered model yet
        return sorted(found, key=lambda mv: int(mv.version), reverse=True)

    def register_model(self, model_id: str, tags: dict[str, str]) -> str:
        """A new registry version of the project's model for the LoggedModel ``model_id``; its number.

        What ``log_model(registered_model_name=…)`` does, without the lines MLflow prints to stderr
        on every registration: the version's source is ``models:/<model_id>``, and the LoggedModel
        lists the version in ``mlflow.modelVersions`` (its page links to the registry from there).
        """
        try:
            self.client.create_registered_model(self.registered_model)
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":  # another eval may have created it meanwhile
                raise
        mv = self.client.create_model_version(
            self.registered_model, source=f"models:/{model_id}", tags=tags, model_id=model_id
        )
        listed = json.loads(self.client.get_logged_model(model_id).tags.get(Tag.MODEL_VERSIONS, "[]"))
        listed.append({"name": mv.name, "version": mv.version})
        self.client.set_logged_model_tags(model_id, {Tag.MODEL_VERSIONS: json.dumps(listed)})
        return str(mv.version)

    def tag_model_version(self, model_version: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_model_version_tag(self.registered_model, model_version, key, value)

    def describe_model_version(self, model_version: str, markdown: str) -> None:
        """The version's description on its registry page (Markdown)."""
        self.client.update_model_version(self.registered_model, model_version, _clip(markdown, MAX_REGISTRY_NOTE))

    def describe_registered_model(self, markdown: str) -> None:
        self.client.update_registered_model(self.registered_model, _clip(markdown, MAX_REGISTRY_NOTE))

    def registry_descriptions(self, model_versions: list[str]) -> dict[str, str]:
        """The descriptions a promotion rewrites, as they are: ``"model"`` (the registered model's),
        ``"experiment"`` (the eval experiment's) and each of ``model_versions`` by number."""
        found = {
            "model": self.client.get_registered_model(self.registered_model).description or "",
            "experiment": self.client.get_experiment(self.experiment_id).tags.get(Tag.NOTE, ""),
        }
        for mv in model_versions:
            found[mv] = self.client.get_model_version(self.registered_model, mv).description or ""
        return found

    def describe_logged_model(self, model_id: str, markdown: str) -> None:
        """A LoggedModel's description (its page renders the ``mlflow.note.content`` tag as Markdown)."""
        self.client.set_logged_model_tags(model_id, {Tag.NOTE: _clip(markdown, MAX_NOTE)})

    def decision_runs(self, model_version: str) -> list:
        """Promotion runs (not dry runs, nor abandoned ones) in which ``model_version`` was the challenger
        or the champion, newest first."""
        query = f"tags.`{Tag.KIND}` = 'promotion' and tags.`{Tag.DRY_RUN}` = 'false'"
        found = self.search_runs([self.decisions_experiment_id], query, ["attributes.start_time DESC"])
        return [
            r
            for r in found
            if model_version in (r.data.params.get("model_version"), r.data.params.get("champion_model_version"))
            and r.data.tags.get(Tag.DECISION_STATE) != DecisionState.ABANDONED
        ]

    def unfinished_decisions(self) -> list:
        """Promotion runs (not dry runs) still RUNNING, oldest first: under way, or left by a promote that died."""
        query = f"tags.`{Tag.KIND}` = 'promotion' and tags.`{Tag.DRY_RUN}` = 'false' and attributes.status = 'RUNNING'"
        return list(self.search_runs([self.decisions_experiment_id], query, ["attributes.start_time ASC"]))

    def comparison_run(self, a_run: str, b_run: str, human_labels: str = "none") -> str | None:
        """The finished comparison run of exactly these two eval runs with these human labels (the label
        file's digest, ``none``), if one was logged."""
        query = (
            f"tags.`{Tag.KIND}` = 'compare' and params.a_run = '{a_run}' and params.b_run = '{b_run}' "
            f"and params.human_labels_digest = '{human_labels}' and attributes.status = 'FINISHED'"
        )
        return next((r.info.run_id for r in self.search_runs([self.decisions_experiment_id], query)), None)

    def champion(self) -> tuple[str, str] | None:
        """(model version, agent version name) the ``champion`` alias points at, or None."""
        return self.aliased(ALIAS)

    def aliased(self, alias: str) -> tuple[str, str] | None:
        """(model version, agent version name) the registry alias ``alias`` points at, or None."""
        try:
            mv = self.client.get_model_version_by_alias(self.registered_model, alias)
        except MlflowException:
            return None
        return str(mv.version), mv.tags.get(Tag.VERSION, "?")

    def set_champion(self, model_version: str) -> None:
        self.client.set_registered_model_alias(self.registered_model, ALIAS, model_version)

    @contextmanager
    def registry_lock(self, purpose: str, timeout_s: float = 120.0, stale_s: float = 600.0) -> Iterator[None]:
        """Exclusive, registry-side: held by creating a registered model named ``<model>.<purpose>-lock``
        (a purpose of :data:`REGISTRY_LOCKS`).

        Registered-model names are unique in every MLflow store (a key in its database,
        whether reached directly or through a tracking server), so exactly one creator
        succeeds; the others wait. It therefore serialises promotions (or registrations) from
        any number of processes and machines that share the registry — no shared file system
        needed. A lock whose holder died is broken: at once when it ran on this machine (a CI job
        killed during ``promote``), else once it is older than ``stale_s``.
        """
        name = self._lock_name(purpose)
        holder = f"{socket.gethostname()}:{os.getpid()}"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.client.create_registered_model(
                    name,
                    tags={Tag.LOCK_HOLDER: holder, Tag.LOCK_PROCESS: _this_process()},
                    description=f"{REGISTRY_LOCKS[purpose]}; removed when it is done.",
                )
                break
            except MlflowException as e:
                if e.error_code not in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
                    raise
            try:
                held = self.client.get_registered_model(name)
            except MlflowException:
                continue  # released in between: try again at once
            if _left_behind(held, stale_s):
                with contextlib.suppress(MlflowException):
                    self.client.delete_registered_model(name)
                continue
            if time.monotonic() > deadline:
                raise RagtrackError(
                    f"another {purpose} holds the registry lock ({held.tags.get(Tag.LOCK_HOLDER, '?')}, "
                    f"{_age_s(held):.0f} s); try again"
                )
            time.sleep(0.2 + random.random() * 0.3)
        try:
            yield
        finally:
            with contextlib.suppress(MlflowException):
                self.client.delete_registered_model(name)

    def lock_holder(self, purpose: str, stale_s: float = 600.0) -> str | None:
        """Who holds the ``purpose`` lock (``host:pid``); None when it is free or was left by a process
        that died (on this machine, or long ago: the next :meth:`registry_lock` breaks it)."""
        try:
            held = self.client.get_registered_model(self._lock_name(purpose))
        except MlflowException:
            return None
        if _left_behind(held, stale_s):
            return None
        return held.tags.get(Tag.LOCK_HOLDER, "?")

    def _lock_name(self, purpose: str) -> str:
        if purpose not in REGISTRY_LOCKS:
            raise ValueError(f"unknown registry lock {purpose!r}; known: {', '.join(REGISTRY_LOCKS)}")
        return f"{self.registered_model}.{purpose}-lock"


def _age_s(lock) -> float:
    return time.time() - lock.creation_timestamp / 1000


def _left_behind(lock, stale_s: float) -> bool:
    """Whether a held registry lock was left by a holder that died: here (at once), or anywhere long ago."""
    return _age_s(lock) > stale_s or _died_here(lock.tags.get(Tag.LOCK_PROCESS, ""))


def _this_process() -> str:
    """This process as a lock records it: host, pid namespace (containers on one host share the
    hostname only if told to, and never a pid namespace) and pid."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # no /proc (macOS, Windows): one pid space per host
        namespace = ""
    return f"{socket.gethostname()}|{namespace}|{os.getpid()}"


def _died_here(process: str) -> bool:
    """Whether a lock holder (:func:`_this_process`) ran on this machine, in this pid namespace, and is
    gone. A holder elsewhere, or one recorded before this tag existed, is left to the age rule."""
    host, _, rest = process.partition("|")
    namespace, _, pid = rest.rpartition("|")
    here_host, _, here_rest = _this_process().partition("|")
    if not pid.isdigit() or host != here_host or namespace != here_rest.rpartition("|")[0]:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


@contextmanager
def without_progress_bar() -> Iterator[None]:
    """MLflow draws a progress bar for every download; ragtrack's commands print their own output."""
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    saved = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _clip(text: str, limit: int) -> str:
    """``text`` cut to what the store keeps, saying so."""
    return text if len(text) <= limit else text[: limit - 40].rstrip() + "\n\n… (cut to fit MLflow's limit)"


def quoted(value: str) -> str:
    """A string literal for an MLflow search filter."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def trace_id_filters(trace_ids: list[str], size: int = 100) -> Iterator[str]:
    """Trace search filters that together select ``trace_ids``, ``size`` IDs each (one filter of
    thousands of IDs is a statement SQLite and PostgreSQL may refuse)."""
    for i in range(0, len(trace_ids), size):
        yield f"request_id IN ({', '.join(quoted(t) for t in trace_ids[i : i + size])})"


def _summary(run) -> RunSummary:
    tags, params = run.data.tags, run.data.params
    return RunSummary(
        run_id=run.info.run_id,
        version=tags.get(Tag.VERSION, "?"),
        golden_digest=tags.get(Tag.GOLDEN_DIGEST, ""),
        judge_identity=tags.get(Tag.JUDGE_IDENTITY, ""),
        min_overlap=params.get(Param.MIN_OVERLAP, ""),
        rank_cutoff=params.get(Param.RANK_CUTOFF, ""),
        substituted=tags.get(Tag.SUBSTITUTED) == "true",
        model_version=tags.get(Tag.MODEL_VERSION, ""),
        metrics={m.current_key(k): v for k, v in run.data.metrics.items()},
        started=run.info.start_time,
        compared_to=tags.get(Tag.COMPARED_TO, ""),
        cautions=tuple(tags[k] for k in sorted(tags) if k.startswith(Tag.WARNING_PREFIX)),
        limited=tags.get(Tag.LIMITED, ""),
        stale_gt=Tag.warning("stale_gt") in tags,
        substitutions=substitutions(params),
        standing=tags.get(Tag.STANDING, ""),
    )


def _probe_sqlite(path: Path, writing: bool) -> None:
    """Open the store's SQLite file (creating it, as MLflow would) and, ``writing``, take the write
    lock for a moment: a folder or file without write permission, or a folder where the file should
    be, is one line now instead of a minute of MLflow's retries and a traceback."""
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            db.execute("PRAGMA schema_version").fetchone()
            if writing:
                db.execute("BEGIN IMMEDIATE")
                db.rollback()
        finally:
            db.close()
    except sqlite3.Error as e:
        what = "write to" if writing and path.is_file() else "open"
        if "locked" in str(e) or "full" in str(e):
            raise StoreError(f"cannot {what} the store {path}: {cause([str(e)])}") from None
        raise StoreError(f"cannot {what} the store {path}: {e} (check the permissions of it and its folder)") from None


def open_store(
    config: ProjectConfig, tracking_uri: str | None = None, *, existing: bool = False, writing: bool = True
) -> Store:
    """Check the store answers, point MLflow at it and make sure the project's experiments exist.

    ``existing``: for commands about what evals wrote (compare, promote, versions): a local store
    that does not exist yet is an error, not a new empty store created to say so. ``writing``:
    the command will write (a local store is probed for it before any work).
    """
    global _exported, _users
    uri = resolve_tracking_uri(config, tracking_uri)
    if existing and (database := local_database(uri)) is not None and not database.is_file():
        raise StoreError(
            f"no tracking store at {database}: nothing has been evaluated in {Path(config.root).resolve()} yet "
            "(run `ragtrack eval --version <v>` there first, or pass the tracking URI of the store with your runs)"
        )
    check_store(uri, writing=writing)
    # Bound MLflow's own retries of a server that goes away mid-run (default: minutes of backoff),
    # and keep its "View run … at" lines (printed as runs end on a server) off a library user's stdout.
    for name, value in (
        ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3"),
        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "60"),
        ("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true"),
    ):
        os.environ.setdefault(name, value)
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if os.environ.get("MLFLOW_TRACKING_URI") != before:  # ours; the user's own setting stays theirs
        if before != _exported:
            _users = before
        _exported = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_registry_uri(uri)
    name = config.project.experiment
    try:
        with setup_lock(uri, required=writing):
            if writing and (database := local_database(uri)) is not None:
                from_template(database)  # a new local store: a copy, not every migration run again
            client = MlflowClient(uri, registry_uri=uri)  # a new store's tables are made here otherwise
            artifacts = artifact_root(uri, config.root)
            return Store(
                uri,
                _experiment(client, name, artifacts),
                name,
                config.project.registered_model,
                client,
                _experiment(client, f"{name}-decisions", artifacts),
                artifacts,
            )
    except MlflowException as e:
        raise StoreError(f"the tracking store {without_credentials(uri)} refused: {first_line(e.message)}") from None
    except SQLAlchemyError as e:  # MLflow's schema set-up failed below it (a damaged database)
        reason = first_line(str(e))
        raise StoreError(f"the tracking store {without_credentials(uri)} could not be set up: {reason}") from None


#: The PostgreSQL advisory lock (one 64-bit key, per database) every ragtrack process holds while MLflow
#: sets the store up: a fixed number, so every ragtrack release and machine takes the same lock.
SETUP_LOCK_KEY = 0x7261677472616B31  # "ragtrak1"
SETUP_LOCK_TIMEOUT_S = 300  # MLflow creates and migrates a new schema in seconds; a wait this long is a hang


@contextmanager
def setup_lock(uri: str, required: bool = True) -> Iterator[None]:
    """One process at a time sets a store up: MLflow creates and migrates the tables when its client first
    meets an empty database, and two processes started together on a fresh PostgreSQL database both did,
    one failing on the catalog's unique keys (``pg_type_typname_nsp_index``, ``pg_class_relname_nsp_index``).
    A local store: :func:`local_lock`. PostgreSQL: an advisory lock, held on a connection of its own (which
    the database releases if the holder dies). A tracking server sets its own store up."""
    if urlsplit(uri).scheme.split("+", 1)[0] != "postgresql":
        with local_lock(uri, required):
            yield
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(uri, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f"SET lock_timeout = '{SETUP_LOCK_TIMEOUT_S}s'"))
            try:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": SETUP_LOCK_KEY})
            except sqlalchemy.exc.OperationalError:  # lock_timeout
                raise StoreError(
                    f"another process has been setting up the tracking store {without_credentials(uri)} for "
                    f"{SETUP_LOCK_TIMEOUT_S} s (PostgreSQL advisory lock {SETUP_LOCK_KEY}); end it, or run again"
                ) from None
            connection.commit()  # the lock is the session's: no transaction stays open while MLflow works
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": SETUP_LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


@contextmanager
def local_lock(uri: str, required: bool = True) -> Iterator[None]:
    """One process at a time, for a local store (a lock file beside its database; no-op for others).

    Setting a store up: the first use creates and migrates its tables, and two evals starting
    together on a new SQLite file both did, failing each other ("duplicate column") and leaving it
    unusable. Registering a version: two first evals of one spec both found no version and each
    registered one. A command that only reads (``required=False``) goes without the lock where its
    file cannot be written (a read-only project, a store mounted read-only)."""
    database = local_database(uri)
    if database is None:
        yield
        return
    try:
        lock = open(f"{database}.lock", "a")  # noqa: SIM115 - closed below, after the yield
    except OSError:
        if required:
            raise
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _despite_racing_inserts(write: Callable[[], object], attempts: int = 4) -> None:
    """Do an idempotent ``write`` that MLflow performs as look-up-then-insert.

    Evals started together on a team server insert the same row at once (the golden set's
    dataset, an experiment tag): all but one fail on the unique key. Asked again a moment
    later, the store finds the row the winner wrote and updates or links it.
    """
    for attempt in range(1, attempts + 1):
        try:
            write()
            return
        except MlflowException as e:
            if attempt == attempts or "unique" not in str(e).lower():
                raise
            time.sleep(0.1 * attempt + random.random() * 0.2)


def _redacted(values: dict[str, str]) -> dict[str, str]:
    return {k: redact_values(str(v)) for k, v in values.items()}


def first_line(text: str) -> str:
    return (text or "").strip().split("\n", 1)[0][:300]


def _experiment(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(name).experiment_id  # another process created it first
