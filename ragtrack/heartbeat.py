"""A line every few seconds while one blocking call runs: no silence over 10 seconds.

Some work cannot report its own progress — loading a sentence-transformers model is one call that
took 4 min 17 s on a loaded 2-core machine, clustering a few hundred questions another — so a
daemon thread says, every ``every`` seconds, that it is still going and for how long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Seconds between two lines: under the 10 s a person waits before wondering whether it hangs.
EVERY = 8.0


@contextmanager
def heartbeat(say: Callable[[str], None] | None, what: str, every: float = EVERY) -> Iterator[None]:
    """Run the block; while it runs, ``say(f"… still {what} ({n} s)")`` every ``every`` seconds."""
    if say is None:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            say(f"… still {what} ({time.monotonic() - start:.0f} s)")

    thread = threading.Thread(target=beat, name="ragtrack-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
