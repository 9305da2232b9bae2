"""``python -m ragtrack.testing.kill STEP ARG…``: ``ragtrack ARG…``, SIGKILLed as its promotion begins STEP.

For the crash tests of promotion: the process dies between two of
:data:`ragtrack.tracking.promotion.STEPS`, chosen by name rather than by timing,
as a cancelled CI job dies (no ``finally`` runs, nothing is flushed).

``trace:N`` instead of a step: SIGKILLed as a ``logs pull`` stores its N-th production trace — mid-write:
the traces of its chunk before it have their info and rating stored and none of their spans, the
harshest point.
"""

from __future__ import annotations

import os
import signal
import sys

from ragtrack.cli import run
from ragtrack.tracking import promotion


def main() -> None:
    step, args = sys.argv[1], sys.argv[2:]
    if step.startswith("trace:"):
        _kill_at_trace(int(step.partition(":")[2]))
    elif step not in promotion.STEPS:
        raise SystemExit(f"unknown step {step!r}; known: {', '.join(promotion.STEPS)}")
    else:
        marked = promotion.begin

        def begin(name: str) -> None:
            if name == step:
                os.kill(os.getpid(), signal.SIGKILL)
            marked(name)

        promotion.begin = begin
    sys.argv = ["ragtrack", *args]
    run()


def _kill_at_trace(n: int) -> None:
    from mlflow.tracing.client import TracingClient

    start_trace = TracingClient.start_trace
    count = 0

    def counted(self, trace_info):
        nonlocal count
        count += 1
        if count == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return start_trace(self, trace_info)

    TracingClient.start_trace = counted


if __name__ == "__main__":
    main()
