"""``python -m ragtrack.cli``."""

from ragtrack.cli import run

run()
