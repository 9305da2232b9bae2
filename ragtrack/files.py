"""Reading and writing the files ragtrack owns: one decoding rule, atomic writes.

Every text file ragtrack reads (corpus, golden set, specs, prompts, config,
checkpoints) is UTF-8, with or without a byte-order mark; anything else is a
one-line error naming the file and the byte offset, never a traceback.
Everything ragtrack writes for the user is written to a temporary file beside
the target and renamed over it, so an interrupted command never leaves a
half-written golden set, cache entry or index behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ragtrack.errors import InputError, Problem, RagtrackError

# The process's umask, read once (it can only be read by setting it): temporary files are created
# private (0600, 0700), and what replaces a user's file must be as readable as a plain write makes it.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


BOM = b"\xef\xbb\xbf"


def decode(data: bytes, source: str | Path) -> str:
    """UTF-8 text of ``data`` (a leading BOM dropped); an error names ``source`` and the byte offset."""
    bom = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = bom + e.start  # offsets in the file, BOM included (the decoder counts from after it)
        line = data.count(b"\n", 0, at) + 1
        message = f"not UTF-8 text (byte {at}: {data[at : at + 1]!r})"
        raise InputError(
            [Problem(str(source), f"{message}{_looks_like(data[bom:])}; save it as UTF-8", line)]
        ) from None


def _looks_like(data: bytes) -> str:
    """What a file that is not UTF-8 probably is: Chinese documents saved by Windows tools are GB18030
    (GBK) or UTF-16, and saying so spares a guess."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return ", but UTF-16 (a byte-order mark)"
    return ", but it reads as GBK/GB18030 Chinese" if _reads_as_gbk(data) else ""


def _reads_as_gbk(data: bytes) -> bool:
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return False
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def shown(path: str | Path) -> str:
    """``path`` as text that prints and logs: the bytes of a name that are not UTF-8 (written by
    another system: a GBK-named file from a Windows share) shown as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_text(value: str) -> bool:
    """Whether ``value`` can be written as UTF-8: no lone surrogate (how Python reads the bytes of a
    file name that are not UTF-8, and what a JSON ``"\\ud800"`` escape decodes to)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def not_utf8_name(name: str) -> str:
    """Why a file whose name is not UTF-8 is refused, and how to rename it."""
    gbk = _reads_as_gbk(os.fsencode(name))
    return (
        f"the file name is not UTF-8{', but it reads as GBK Chinese' if gbk else ''}: passage IDs are made "
        "from file names, and golden sets and MLflow hold UTF-8 text only; rename it"
        + (" (`convmv -f gbk -t utf-8 --notest FILE` does)" if gbk else "")
    )


def lone_surrogate(value: object, at: str = "") -> str | None:
    """The field path (``"question"``, ``"gt_context_ids[1]"``; ``""`` for the value itself) of the first
    string in a decoded JSON value that holds a lone surrogate, or None. JSON can spell one
    (``"\\ud800"``), but it is no character: nothing can store it as UTF-8."""
    if isinstance(value, str):
        return None if is_text(value) else at
    if isinstance(value, dict):
        items = [(k, f"{at}.{k}" if at else str(k)) for k in value]
        for key, where in items:
            if not is_text(key):
                return where
            if (found := lone_surrogate(value[key], where)) is not None:
                return found
    if isinstance(value, list):
        for n, item in enumerate(value):
            if (found := lone_surrogate(item, f"{at}[{n}]")) is not None:
                return found
    return None


def surrogate_problem(source: str | Path, line: int | None, field: str) -> Problem:
    return Problem(
        str(source),
        "holds a lone surrogate escape (such as \\ud800): half of a character, not one; write the character "
        "itself, or both halves of its pair",
        line,
        field or None,
    )


def read_text(path: str | Path, *, normalize: bool = False) -> str:
    """A text file by the one decoding rule; ``normalize`` also unifies line ends and Unicode (NFC)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InputError([Problem(str(path), "is a folder, expected a file")]) from None
    except OSError as e:
        raise InputError([Problem(str(path), f"cannot read: {e.strerror or e}")]) from None
    text = decode(data, path)
    if normalize:
        text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    return text


def read_jsonl(path: Path, text: str | None = None) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """Non-blank lines of a JSONL file as (line number, object); bad lines become problems."""
    rows: list[tuple[int, dict]] = []
    problems: list[Problem] = []
    text = read_text(path) if text is None else text
    if text.lstrip().startswith("[") and _is_json_array(text):  # one error, not one per line
        return rows, [
            Problem(
                str(path),
                "holds a JSON array, but JSON Lines has one object per line (`jq -c '.[]' FILE` converts it)",
                1,
            )
        ]
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append(Problem(str(path), f"bad JSON: {e.msg} (column {e.colno})", n))
            continue
        except RecursionError:
            problems.append(Problem(str(path), "bad JSON: nested too deeply", n))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(str(path), "each line must be a JSON object", n))
            continue
        if (field := lone_surrogate(row)) is not None:
            problems.append(surrogate_problem(path, n, field))
            continue
        rows.append((n, row))
    return rows, problems


def _is_json_array(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except (json.JSONDecodeError, RecursionError):
        return False


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777  # a file replaced keeps its mode
    except OSError:
        mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        raise named(e, path) from None


def named(error: BaseException, path: str | Path) -> BaseException:
    """``error`` naming ``path`` if it is an OSError that names no file, or names the temporary file
    it was written through (a full disk fails ``write()``, which knows no file name)."""
    if isinstance(error, OSError) and error.errno is not None and str(error.filename) != str(path):
        return OSError(error.errno, error.strerror, str(path))
    return error


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: object, indent: int | None = 1) -> None:
    atomic_write_text(path, json.dumps(payload, indent=indent, ensure_ascii=False, default=str))


@contextmanager
def atomic_folder(target: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``target`` to fill; it replaces ``target`` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        tmp.chmod(0o777 & ~_UMASK)
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)


def hold_lock(lock_path: str | Path, busy: str) -> IO[str]:
    """An exclusive lock on ``lock_path`` (created), held by the returned open file until
    :func:`release_lock` or the process's end (a SIGKILLed holder lets it go with its files); raises
    ``RagtrackError(busy)`` at once when another process holds it. Two evals sharing a checkpoint, two
    pulls sharing a cursor: the second refuses rather than writing the same things twice."""
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    while True:
        holder = open(lock_path, "a")  # noqa: SIM115 - held open until release_lock()
        try:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder.close()
            raise RagtrackError(busy) from None
        # The last holder removes the file as it lets go: a lock taken on the file it removed is no
        # lock (a process starting next would create a new one and hold it too). Take the new one.
        try:
            if os.stat(lock_path).st_ino == os.fstat(holder.fileno()).st_ino:
                return holder
        except FileNotFoundError:
            pass
        holder.close()


def release_lock(holder: IO[str]) -> None:
    """Let a :func:`hold_lock` lock go, leaving no lock file behind."""
    Path(holder.name).unlink(missing_ok=True)
    holder.close()  # which lets the lock go
