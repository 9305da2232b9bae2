"""``python -m ragtrack.testing.kill STEP ARG…``: ``ragtrack ARG…``, SIGKILLed as its promotion begins STEP.

For the crash tests of promotion: the process dies between two of
:data:`ragtrack.tracking.promotion.STEPS`, chosen by name rather than by timing,
as a cancelled CI job dies (no ``finally`` runs, nothing is flushed).
"""

from __future__ import annotations

import os
import signal
import sys

from ragtrack.cli import run
from ragtrack.tracking import promotion


def main() -> None:
    step, args = sys.argv[1], sys.argv[2:]
    if step not in promotion.STEPS:
        raise SystemExit(f"unknown step {step!r}; known: {', '.join(promotion.STEPS)}")
    marked = promotion.begin

    def begin(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)
        marked(name)

    promotion.begin = begin
    sys.argv = ["ragtrack", *args]
    run()


if __name__ == "__main__":
    main()
