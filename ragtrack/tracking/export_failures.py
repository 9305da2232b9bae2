"""Why the tracking store could not write a trace, in its own words.

A trace write that fails raises the store's error (:mod:`ragtrack.tracking.trace_writer`); what the
user is then told is the cause it gave — "the disk is full" only when it said so (``No space left on
device``, ``[Errno 28]``, SQLite's ``database or disk is full``), never as a guess for any other cause;
a locked SQLite file (another writer held it longer than SQLite waits) is said as such, and anything
else (a read-only database, a server that went away) is quoted.
"""

from __future__ import annotations

#: MLflow's and the OS's words for ENOSPC / EDQUOT.
_FULL_DISK = ("no space left on device", "[errno 28]", "disk is full", "disk quota exceeded", "[errno 122]")


#: SQLite's words for a lock it waited out.
_LOCKED = ("database is locked", "database table is locked")


def cause(said: list[str]) -> str:
    """Why the store could not write, from what it said (the messages of the errors it raised)."""
    if any(word in s.lower() for s in said for word in _LOCKED):
        return (
            "its SQLite database was locked by another writer for longer than SQLite waits (another pull or "
            "eval): not a full disk; run one at a time, or use a database server for a shared store"
        )
    if full := next((s for s in said if any(word in s.lower() for word in _FULL_DISK)), None):
        return f"the disk is full ({_clip(full)}): free space on it"
    if said:
        more = f" (and {len(said) - 1} more error(s))" if len(said) > 1 else ""
        return f"MLflow said: {_clip(said[0])}{more}"
    return "MLflow gave no reason"


def _clip(text: str, width: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
