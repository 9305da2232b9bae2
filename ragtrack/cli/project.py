"""``ragtrack ui``: the project around the evaluations."""

from __future__ import annotations

import os

import click

from ragtrack.cli import console, main


@main.command()
@click.option("--port", default=5000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--tracking-uri", help="MLflow tracking URI (default: this project's store).")
@click.pass_context
def ui(ctx, port, host, tracking_uri):
    """Start the MLflow UI on this project's store."""
    from ragtrack.api import ui_command

    cmd = ui_command(root=ctx.obj["root"], tracking_uri=tracking_uri, host=host, port=port)
    console.print(f"MLflow UI on http://{host}:{port}  (Ctrl+C to stop)")
    os.execv(cmd[0], cmd)
