"""``python -m ragtrack.cli``."""

from ragtrack.cli import main

main()
