"""``ragtrack corpus``: the canonical passages golden sets are written against."""

from __future__ import annotations

import click

from ragtrack.cli import main


@main.group()
def corpus() -> None:
    """Corpus tools: the canonical passages (and their IDs) that golden sets name."""
