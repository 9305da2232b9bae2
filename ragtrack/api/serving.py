"""``ragtrack serve``: the champion (or any aliased version) behind MLflow's own model server.

The registered pyfunc is what answers, so the served agent is exactly the one the
registry says won: ``mlflow models serve -m models:/<model>@champion`` in this Python
environment (``--env-manager local``: the installed ragtrack builds the agent).

MLflow resolves the alias once, when the server starts: it downloads that model
version's files and serves them until it stops. A ``ragtrack promote`` that moves the
alias therefore reaches a running server only when it is started again.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ragtrack.config import load_config
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.promotion import ALIAS
from ragtrack.secrets import without_credentials
from ragtrack.tracking.store import open_store

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServePlan:
    """What ``ragtrack serve`` starts: the command, its environment, and what it will serve."""

    model_uri: str  # models:/<registered model>@<alias>, as the server resolves it
    model_version: str  # what the alias points at now
    version: str  # that model version's agent version (v5)
    url: str  # where to POST questions
    command: list[str]
    env: dict[str, str]  # this process's, with the store the server reads the registry from
    tracking_uri: str  # without credentials, for display

    @property
    def loopback(self) -> bool:
        return self.url.split("//")[1].rsplit(":", 1)[0].strip("[]") in LOOPBACK


def serve_command(
    *,
    root: str | Path = ".",
    alias: str = ALIAS,
    host: str = "127.0.0.1",
    port: int = 5001,
    workers: int = 1,
    tracking_uri: str | None = None,
) -> ServePlan:
    """The ``mlflow models serve`` command line that serves the version ``alias`` names in this project's
    registry. An alias no version has is an error here, before any server starts."""
    if workers < 1:
        raise RagtrackError(f"workers must be 1 or more (got {workers})")
    store = open_store(load_config(root), tracking_uri, existing=True, writing=False)
    found = store.aliased(alias)
    if found is None:
        hint = "promote a version first: ragtrack promote <version>" if alias == ALIAS else "set it in the MLflow UI"
        raise RagtrackError(f"no version of {store.registered_model} has the alias {alias!r} ({hint})")
    model_uri = f"models:/{store.registered_model}@{alias}"
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "--env-manager", "local"]
    command += ["--host", host, "--port", str(port), "--workers", str(workers)]
    address = f"[{host}]" if ":" in host else host
    return ServePlan(
        model_uri,
        found[0],
        found[1],
        f"http://{address}:{port}/invocations",
        command,
        {**os.environ, "MLFLOW_TRACKING_URI": store.tracking_uri, "PATH": _with_python_bin(os.environ.get("PATH", ""))},
        without_credentials(store.tracking_uri),
    )


def _with_python_bin(path: str) -> str:
    """``PATH`` with this interpreter's scripts folder first: MLflow starts ``uvicorn`` by name, and a
    ragtrack run as ``.venv/bin/ragtrack`` (venv not activated) would not find the one beside it."""
    scripts = str(Path(sys.executable).parent)
    return os.pathsep.join([scripts, *(p for p in path.split(os.pathsep) if p and p != scripts)])
