"""``ragtrack serve``: the champion behind ``mlflow models serve``; and how ragtrack runs a server it starts."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import click

from ragtrack.cli import console, err, main, project_root, warn
from ragtrack.errors import RagtrackError


@main.command()
@click.option("--alias", default="champion", show_default=True, help="The registry alias whose version is served.")
@click.option("--port", default=5001, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="0.0.0.0 serves every network (no auth).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1), help="Server processes.")
@click.option("--tracking-uri", help="MLflow tracking URI of the registry (default: this project's store).")
@click.pass_context
def serve(ctx, alias, port, host, workers, tracking_uri):
    """Serve the version the registry calls champion (any alias with --alias) over HTTP, with MLflow's
    model server: POST questions to /invocations, get answers with their contexts.

    The alias is resolved when the server starts: after `ragtrack promote` moves it, start
    the server again to serve the new champion.

    \b
    Examples:
      ragtrack serve                          # http://127.0.0.1:5001/invocations
      ragtrack serve --alias challenger --port 5002
      curl -s http://127.0.0.1:5001/invocations -H 'Content-Type: application/json' \\
           -d '{"inputs": ["How do I reset my password?"]}'
    """
    from ragtrack.api import serve_command

    _port_free(host, port)
    plan = serve_command(
        root=project_root(ctx), alias=alias, host=host, port=port, workers=workers, tracking_uri=tracking_uri
    )
    if not plan.loopback:
        warn(f"serving on {host}: anyone who reaches this machine can ask the agent (and spend its LLM budget)")
    err.print(
        f"starting {plan.model_uri} (model version {plan.model_version}: {plan.version}) from {plan.tracking_uri} …",
        highlight=False,
    )
    example = json.dumps({"inputs": ["your question"]})
    ready = (
        f"serving {plan.version} (model version {plan.model_version}, @{alias}) on {plan.url}  (Ctrl+C to stop)\n"
        f"  curl -s {plan.url} -H 'Content-Type: application/json' -d '{example}'"
    )
    supervise(plan.command, host, port, ready, env=plan.env)


def supervise(cmd: list[str], host: str, port: int, ready: str, env: dict[str, str] | None = None) -> None:
    """Run a server until it exits or Ctrl+C, printing ``ready`` once ``host:port`` accepts connections.

    Its own process group, stopped as a whole: `mlflow ui` and `mlflow models serve` leave their
    workers running on SIGTERM (and on Ctrl+C) to the parent alone, holding the port."""
    server = subprocess.Popen(cmd, start_new_session=True, env=env)
    try:
        # Printed once it answers: printed at once, an address refuses connections for seconds.
        if _answers(server, "127.0.0.1" if host in ("0.0.0.0", "::") else host, port):
            console.print(ready, highlight=False)
        elif server.returncode:  # it never answered: what it printed says why (a model that did not load)
            raise RagtrackError(f"the server stopped (exit status {server.returncode}) before it could answer")
        if code := server.wait():
            raise RagtrackError(f"the server stopped with exit status {code}")
    finally:
        if server.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # workers the server itself left behind


def _port_free(host: str, port: int) -> None:
    """Refuses a port something already listens on, before a model is loaded for nothing: the server
    would fail to bind after loading it, or, worse, a client would reach the other server."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a closed port's TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as e:
            hint = "another server? pick another --port" if e.errno == errno.EADDRINUSE else "check --host"
            raise RagtrackError(f"cannot serve on {host}:{port}: {e.strerror} ({hint})") from None


def _answers(server: subprocess.Popen, host: str, port: int) -> bool:
    """Wait until ``GET /health`` on ``host:port`` answers 200 (True) or the server exits (False). Over
    HTTP, not a bare connection: with several workers the port accepts connections before any worker
    has loaded the model, and MLflow's UI and model server both answer /health once they can serve."""
    address = f"[{host}]" if ":" in host else host
    while server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.3)
    return False
