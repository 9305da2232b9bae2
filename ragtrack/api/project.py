"""The project around the evaluations: its MLflow UI."""

from __future__ import annotations

from pathlib import Path

from ragtrack.config import load_config


def ui_command(
    *, root: str | Path = ".", tracking_uri: str | None = None, host: str = "127.0.0.1", port: int = 5000
) -> list[str]:
    """The ``mlflow ui`` command line that serves this project's store."""
    import sys

    from ragtrack.tracking.store import artifact_root, resolve_tracking_uri

    uri = resolve_tracking_uri(load_config(root), tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifacts := artifact_root(uri):
        cmd += ["--default-artifact-root", artifacts]
    return cmd
