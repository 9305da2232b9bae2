"""Why MLflow's trace exporter lost traces, in its own words, heard while a write is flushed.

MLflow exports traces asynchronously: a write that fails is logged as a warning by its exporter
(``Failed to send trace to MLflow backend: …``) or its export queue (``… Error: …``) and dropped,
and ragtrack finds out only by looking the traces up afterwards. What the user is then told is the
cause MLflow gave — "the disk is full" only when it said so (``No space left on device``,
``[Errno 28]``, SQLite's ``database or disk is full``), never as a guess for any other cause; a
locked SQLite file (another writer held it longer than SQLite waits) is said as such, and anything
else (a read-only database, a full export queue, a server that went away) is quoted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

#: The parent logger of MLflow's trace exporters and their queue (``….mlflow_v3``, ``….async_export_queue``).
EXPORT_LOGGER = "mlflow.tracing.export"
#: MLflow's and the OS's words for ENOSPC / EDQUOT.
_FULL_DISK = ("no space left on device", "[errno 28]", "disk is full", "disk quota exceeded", "[errno 122]")


@contextmanager
def heard() -> Iterator[list[str]]:
    """The warnings MLflow's trace exporters give inside the block (from their worker threads too), kept
    from stderr: the command states the cause itself. The CLI quiets MLflow's loggers, so the level of
    their parent is set for the block (the exporters' own loggers inherit it)."""
    logger = logging.getLogger(EXPORT_LOGGER)
    said: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    handler = _Keep(logging.WARNING)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


#: SQLite's words for a lock it waited out.
_LOCKED = ("database is locked", "database table is locked")


def cause(said: list[str]) -> str:
    """Why MLflow (or its store) could not write, from what it said (:func:`heard`, or an exception's text)."""
    if any(word in s.lower() for s in said for word in _LOCKED):
        return (
            "its SQLite database was locked by another writer for longer than SQLite waits (another pull or "
            "eval, or MLflow's own export threads on a loaded machine): not a full disk; run one at a time, "
            "or use a database server for a shared store"
        )
    if full := next((s for s in said if any(word in s.lower() for word in _FULL_DISK)), None):
        return f"the disk is full ({_clip(full)}): free space on it"
    if said:
        more = f" (and {len(said) - 1} more warning(s))" if len(said) > 1 else ""
        return f"MLflow said: {_clip(said[0])}{more}"
    return "MLflow gave no reason"


def _clip(text: str, width: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
