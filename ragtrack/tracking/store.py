"""Where runs go: the project's local MLflow store unless told otherwise.

Default: ``mlruns/mlflow.db`` (SQLite; MLflow 3 no longer takes the old file
store) with artifacts in ``mlruns/artifacts``, both under the project root and
git-ignored. ``--tracking-uri`` beats ``MLFLOW_TRACKING_URI`` beats
``ragtrack.toml`` beats the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow import MlflowClient

from ragtrack.config import ProjectConfig


@dataclass(frozen=True)
class Store:
    tracking_uri: str
    experiment_id: str  # eval runs: every version side by side under the same metric names
    experiment_name: str
    registered_model: str
    client: MlflowClient
    decisions_experiment_id: str = ""  # comparison and promotion runs, kept out of the eval charts

    def side_experiment(self, suffix: str) -> str:
        """``<experiment>-<suffix>`` (created on first use), e.g. ``ragtrack-judges``."""
        return _experiment(self.client, self.tracking_uri, f"{self.experiment_name}-{suffix}")


def default_tracking_uri(root: Path) -> str:
    folder = (root / "mlruns").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


# mlflow.set_tracking_uri() also exports MLFLOW_TRACKING_URI; remember what we exported so
# that a later call for another project is not mistaken for the user's own setting.
_exported: str | None = None


def resolve_tracking_uri(config: ProjectConfig, override: str | None = None) -> str:
    from_env = os.environ.get("MLFLOW_TRACKING_URI")
    if from_env == _exported:
        from_env = None
    return override or from_env or config.project.tracking_uri or default_tracking_uri(config.root)


def open_store(config: ProjectConfig, tracking_uri: str | None = None) -> Store:
    """Point MLflow at the store and make sure the project's experiment exists."""
    global _exported
    uri = resolve_tracking_uri(config, tracking_uri)
    mlflow.set_tracking_uri(uri)
    _exported = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_registry_uri(uri)
    client = MlflowClient(uri, registry_uri=uri)
    name = config.project.experiment
    return Store(
        uri,
        _experiment(client, uri, name),
        name,
        config.project.registered_model,
        client,
        _experiment(client, uri, f"{name}-decisions"),
    )


def _experiment(client: MlflowClient, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    # A local SQLite store keeps its artifacts beside the database, not in the CWD.
    artifacts = None
    if uri.startswith("sqlite:///"):
        artifacts = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri()
    return client.create_experiment(name, artifact_location=artifacts)
