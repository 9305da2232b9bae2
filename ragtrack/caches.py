"""What ragtrack keeps under ``.ragtrack/cache``, and how to see and prune it.

Every cache is a pure function of its key (an index of a corpus digest and its
parameters, a reply to one exact request), so deleting an entry never changes a
result: the next run that needs it builds or asks again. Nothing is deleted on
its own — like pip's or Hugging Face's caches, ragtrack leaves pruning to the
user (``ragtrack cache prune``), because a pruned LLM reply costs money to ask
again. What it does is keep each entry's last use in its modification time
(:func:`mark_used` on every hit), so pruning can drop what no run has needed
for a while and keep what the current versions and golden set still read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ragtrack.registry import Registry


@dataclass(frozen=True)
class CacheKind:
    """One cache under the cache folder: ``folder`` holds its entries, each a subfolder
    (``pattern`` None) or a file matching ``pattern`` (deleted with its SQLite siblings). A kind
    whose entries do not depend on the project may live elsewhere: the folder named by the
    environment variable ``env``, when set (one folder for every project and run of a machine)."""

    name: str
    folder: str
    description: str
    pattern: str | None = None
    env: str | None = None


CACHE_KINDS: Registry[CacheKind] = Registry(
    "cache kind",
    {
        kind.name: kind
        for kind in [
            CacheKind("index", "index", "retrieval indexes of pipeline versions (units, FAISS)"),
            CacheKind(
                "vectors",
                "vectors",
                "text vectors, one SQLite file per embedding model (content-addressed)",
                "*.sqlite",
                env="RAGTRACK_VECTOR_CACHE",
            ),
            CacheKind("llm", "llm", "LLM replies: judges and the agent's LLM steps", "*/*.json"),
            CacheKind("agents", "agents", "replies of external agents (Dify, RAGFlow, HTTP, Python)", "*/*.json"),
            CacheKind("passage-index", "passage-index", "indexes of `ragtrack corpus search`"),
            CacheKind("local-models", "local-models", "GGUF models converted for transformers"),
        ]
    },
)


def cache_path(cache_dir: Path, kind: str) -> Path:
    """The folder of cache ``kind`` (a registered name): the one its environment variable names, when
    set, else its folder under ``cache_dir``."""
    found = CACHE_KINDS.get(kind)
    if found.env and os.environ.get(found.env):
        return Path(os.environ[found.env]).expanduser()
    return cache_dir / found.folder


def mark_used(path: Path) -> None:
    """Record that a run read ``path`` (its modification time), so pruning keeps it. Best effort:
    a read-only cache is still a cache."""
    with contextlib.suppress(OSError):
        os.utime(path)


def first_showing(cache_dir: Path, text: str) -> bool:
    """True the first time ``text`` (warnings a command is about to print) is asked about beside this
    cache, and remembers it (in ``.ragtrack/shown``, next to the cache: state, not a cache entry to
    prune); False after. Keyed by the text's hash, so a changed corpus (other warnings, or the same ones
    at other lines) is shown again. Best effort: a read-only folder shows every time."""
    path = cache_dir.parent / "shown" / hashlib.sha256(text.encode()).hexdigest()[:16]
    if path.exists():
        mark_used(path)
        return False
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text[:500], encoding="utf-8")
    return True


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    bytes: int
    last_used: float  # seconds since the epoch


def entries(cache_dir: Path, kinds: Iterable[str] | None = None) -> list[Entry]:
    """Every entry of the named cache ``kinds`` (default: all), oldest use first."""
    found = []
    for name in kinds if kinds is not None else CACHE_KINDS.names():
        kind = CACHE_KINDS.get(name)
        folder = cache_path(cache_dir, name)
        paths = sorted(folder.glob(kind.pattern)) if kind.pattern else sorted(p for p in folder.glob("*") if p.is_dir())
        for path in paths:
            if path.name.startswith("."):  # an atomic write in progress (files.atomic_folder / atomic_write_*)
                continue
            try:
                found.append(Entry(name, path, _size(path), path.stat().st_mtime))
            except OSError:  # removed by another process meanwhile
                continue
    return sorted(found, key=lambda e: e.last_used)


def prune(
    cache_dir: Path, unused_for_days: float, kinds: Iterable[str] | None = None, *, dry_run: bool = False
) -> list[Entry]:
    """Delete the entries no run has used for ``unused_for_days``; returns them (only lists them
    with ``dry_run``). An entry in use by a run at this moment is rebuilt or asked again by it."""
    cutoff = time.time() - unused_for_days * 86400
    stale = [e for e in entries(cache_dir, kinds) if e.last_used < cutoff]
    if not dry_run:
        for entry in stale:
            if entry.path.is_dir():
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                for path in (entry.path, *_sqlite_siblings(entry.path)):
                    path.unlink(missing_ok=True)
    return stale


def _sqlite_siblings(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def _size(path: Path) -> int:
    if path.is_file():
        return sum(p.stat().st_size for p in (path, *_sqlite_siblings(path)) if p.exists())
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
