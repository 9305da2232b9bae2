"""The ``ragtrack`` command line: a thin shell over :mod:`ragtrack.api`, rendered by :mod:`ragtrack.report`.

This module holds the command group, its options and its error handling; each
group of commands lives in a module of its own and imports the API only when
it runs, so ``ragtrack --help`` stays instant.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from ragtrack.errors import RagtrackError

# emoji=False: rich would turn `file.txt:100:` in a warning into `file.txt💯`.
console = Console(stderr=False, emoji=False)
err = Console(stderr=True, emoji=False)
MACHINE_WIDTH = 1000  # columns when not printing to a terminal
# A file system that refuses (read-only, no permission, full, a folder where a file belongs): the
# user's environment, not a bug.
_REFUSING_FILE_SYSTEM = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EISDIR}

LLM_HELP = "offline (no model: built-in heuristics), openai:<model>, local:<path|smollm2> or a ragtrack.toml profile."


def _alone_on_stdout(ctx: click.Context, param: click.Parameter, out):
    """``--markdown -`` / ``--json -``: stdout is that alone (``> summary.md``), the tables go to stderr."""
    if out is not None and param.name == "json_out":
        ctx.meta[_JSON_OUT] = out.name  # an error or interrupt is written there too (see _Group)
    if out is not None and getattr(out, "name", "") == "<stdout>":
        if ctx.meta.get(_STDOUT_TAKEN):  # two documents on one stream: neither would parse
            raise click.BadParameter("only one of --markdown - and --json - can print to stdout; send one to a file")
        ctx.meta[_STDOUT_TAKEN] = True
        console.file = sys.stderr
        ctx.call_on_close(lambda: setattr(console, "file", None))  # None: rich's default, sys.stdout
    return out


_JSON_OUT, _STDOUT_TAKEN = "ragtrack.json_out", "ragtrack.stdout_taken"
#: What a command knew when it was stopped, for its ``--json`` (an eval: the items kept of how many).
JSON_SO_FAR = "ragtrack.json_so_far"


def _json_failure(ctx: click.Context, message: str, code: int) -> None:
    """A command asked for ``--json`` that ends on an error or an interrupt still writes it: a script
    must not read what an earlier step left in the file, nor an empty stdout."""
    if (name := ctx.meta.get(_JSON_OUT)) is None:
        return
    failure = {"command": ctx.invoked_subcommand, "error": message, "exit_status": code}
    failure.update(ctx.meta.get(JSON_SO_FAR, {}))
    text = json.dumps(failure, ensure_ascii=False)
    if name == "<stdout>":
        click.echo(text)
    else:  # the command's own handle closed with its context: written anew
        with contextlib.suppress(OSError):
            Path(name).write_text(text + "\n", encoding="utf-8")


def _output_file(flag: str, dest: str, mode: str, help: str):
    """An option naming a file a command also writes its result to; ``-`` is stdout, alone."""
    return click.option(
        flag, dest, type=click.File(mode, encoding="utf-8"), metavar="FILE", callback=_alone_on_stdout, help=help
    )


MARKDOWN = _output_file(
    "--markdown",
    "markdown",
    "a",
    "Also append the run's description (the Markdown its MLflow page shows) to this file, e.g. "
    "$GITHUB_STEP_SUMMARY or a pull-request comment; - prints it (alone on stdout: the tables go to stderr).",
)


HUMAN_LABELS = click.option(
    "--human-labels",
    type=click.Path(dir_okay=False),
    help="Human labels of versions' answers (JSONL: the calibration format plus `version`; docs/statistics.md): "
    "each judged metric gets a prediction-powered estimate and 95% interval beside the judge's.  "
    "[default: [project] human_labels of ragtrack.toml, else golden/labels/human-labels.jsonl when present]",
)


def engine_options(work: str):
    """--engine and --master: where ``work`` is done (the engines registry's names)."""
    from ragtrack.engines import ENGINES

    def add(f):
        f = click.option(
            "--master", help="Spark master for --engine spark (default: [spark] master of ragtrack.toml, local[*])."
        )(f)
        return click.option(
            "--engine",
            type=click.Choice(ENGINES.names()),
            default="local",
            show_default=True,
            help=f"Where {work}: this process, or Spark.",
        )(f)

    return add


class _When(click.ParamType):
    """A date or time on the command line (``--since``, ``--until``): ISO 8601, refused as it is parsed
    (``"last tuesday"``, ``2025-13-45``) in one line naming the option, never deep in a command."""

    name = "DATE"

    def convert(self, value, param, ctx) -> str:
        from ragtrack.production.fields import FieldError, when

        try:
            return when(value)
        except FieldError as e:
            self.fail(str(e), param, ctx)


WHEN = _When()

JSON_OUT = _output_file(
    "--json",
    "json_out",
    "w",
    "Also write the result as JSON to this file for a script (run ID, model version, figures, errors, "
    "exit status); - prints it (alone on stdout).",
)


def write_json(out, payload: dict) -> None:
    """For ``--json``: ``payload`` (``report.*_json``) written to ``out`` (None: not asked for)."""
    if out is not None:
        out.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")


def write_markdown(out, run_id: str, root, tracking_uri: str | None) -> None:
    """For ``--markdown``: the run's description, appended to ``out`` (None: not asked for)."""
    if out is not None:
        from ragtrack.api import run_markdown

        out.write(run_markdown(run_id, root=root, tracking_uri=tracking_uri).rstrip("\n") + "\n\n")


def _quiet_libraries() -> None:
    """MLflow, transformers and friends are chatty; ragtrack prints what matters."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("mlflow", "alembic", "transformers", "sentence_transformers", "httpx", "faiss", "urllib3", "py4j"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # It logs every failed database write with its traceback before raising it, which ragtrack reports in a line.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    logging.getLogger("ragtrack").setLevel(logging.WARNING)


# True in the ``ragtrack`` process itself (not when the group is invoked in-process, as by tests).
_exit_at_once = False


def run() -> None:
    """The console script: ``main``, in a process that may end at once when interrupted.

    The heap is frozen before the interpreter exits: its final cyclic collections would walk
    every object MLflow and its friends loaded (0.9 s after ``compare``, a third of the command)
    to free memory the process hands back anyway. atexit handlers, ``weakref.finalize`` and
    objects freed by reference counting still run as before.

    Once the command is over (see :meth:`_Group.invoke`), what is left is the interpreter's exit,
    where MLflow's atexit callbacks may wait seconds for its trace export: an interruption there ends
    the process at once, as one during the command does, instead of raising into a callback (a
    traceback ending in ``Terminated``, and exit status 0).
    """
    global _exit_at_once
    _exit_at_once = True
    try:
        main()
    finally:
        gc.freeze()


def _exit_when_interrupted() -> None:
    """From now on Ctrl-C and SIGTERM end the process at once: the command has nothing left to keep."""
    if _exit_at_once and threading.current_thread() is threading.main_thread():
        for signum, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
            signal.signal(signum, lambda *_, code=code: _interrupted_exit(code))


def _interrupted_exit(code: int) -> None:
    """Say so, and end the process with ``code`` now (nothing in flight is awaited)."""
    click.echo("interrupted", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextmanager
def cyclic_gc_paused() -> Iterator[Callable[[], None]]:
    """No cyclic garbage collection inside, or until the ``resume`` it yields is called.

    For a command's set-up and for bounded work. Importing MLflow and its SQL store creates
    some 300,000 long-lived objects (torch and the models more), and as the heap grows the
    collector walks all of it again and again (0.7 s of ``compare``) to free almost nothing;
    reference counting still frees everything that is not in a cycle (the few thousand objects
    in cycles made meanwhile are kept). On resuming, what is alive is frozen (``gc.freeze``)
    before the collector is back on: else its first young collection would walk every object
    made meanwhile (0.2 s), and the next one again. In-process (tests, a notebook) the group
    unfreezes when the command ends, so nothing stays exempt from collection afterwards.
    """
    enabled = gc.isenabled()
    paused = [True]

    def resume() -> None:
        if paused[0]:
            paused[0] = False
            gc.freeze()
            if enabled:
                gc.enable()

    gc.disable()
    try:
        yield resume
    finally:
        resume()


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interruption: the eval ends its run as KILLED and keeps its checkpoint."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def _redelivered(unraisable) -> None:
    """``sys.unraisablehook`` while a command runs: an interruption that landed in a finalizer (a
    ``__del__``, a weakref callback) cannot stop the command from there, and Python would print its
    traceback and drop it; it is sent again instead, to land in the command's own code. Sent a moment
    later from a thread: sent from here, its handler would raise inside this hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        signum = signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT
        threading.Timer(0.1, os.kill, (os.getpid(), signum)).start()
        return
    sys.__unraisablehook__(unraisable)


def _cause_line(message: str) -> str:
    """The line of an error message that says what went wrong, at most 300 characters: the first, save
    SQLAlchemy's note on where a failed write was flushed ("database or disk is full" is the next line)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("(raised as a result of Query-invoked autoflush")]
    return (lines[0] if lines else message.strip())[:300]


class _Group(click.Group):
    """Every error a user can cause is one line on stderr and exit status 2, never a traceback."""

    def invoke(self, ctx: click.Context):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_sigterm)
            hook, sys.unraisablehook = sys.unraisablehook, _redelivered
            ctx.call_on_close(lambda: setattr(sys, "unraisablehook", hook))
        try:
            return super().invoke(ctx)
        except click.UsageError:  # raised while parsing, before the subcommand's context closes: reset here
            console.file = None  # a `--markdown -` parsed before the bad option had sent the tables to stderr
            raise
        except KeyboardInterrupt as e:
            _exit_when_interrupted()  # a second signal while this is said must not raise into it
            code = 143 if isinstance(e, Terminated) else 130
            _json_failure(ctx, "interrupted", code)
            if _exit_at_once:
                # Calls still in flight in worker threads are abandoned rather than awaited: everything
                # worth keeping is already written (the checkpoint, the run's status).
                _interrupted_exit(code)
            click.echo("interrupted", err=True)
            sys.exit(code)
        except RagtrackError as e:
            from ragtrack.secrets import redact_values

            # Plain: paths with file:line must not be wrapped. Redacted: a key pasted as a name is echoed.
            click.echo(f"error: {redact_values(str(e))}", err=True)
            _json_failure(ctx, redact_values(str(e)), 2)
            sys.exit(2)
        except Exception as e:
            # The tracking store failing mid-command (a server that went away, a refused write), or the
            # file system refusing (read-only, no permission, full): one line, not a traceback. Anything
            # else is a bug and keeps its traceback.
            if isinstance(e, OSError) and e.errno in _REFUSING_FILE_SYSTEM:
                from ragtrack.files import shown

                full = e.errno in _FULL
                where = (
                    f": {shown(e.filename)}" if e.filename else f" (writing under {ctx.obj['root']})" if full else ""
                )
                _fail(ctx, f"{e.strerror}{where}{_FREE_SPACE if full else ''}")
            if type(e).__module__.startswith("mlflow"):
                from ragtrack.secrets import redact

                message = redact(_cause_line(getattr(e, "message", None) or str(e)))
                if "disk is full" in message:  # SQLite's own words for ENOSPC
                    from ragtrack.tracking.store import database_in_use

                    _fail(ctx, f"No space left on device: {database_in_use() or 'the tracking store'}{_FREE_SPACE}")
                _fail(ctx, f"tracking store: {message}")
            raise
        finally:
            _exit_when_interrupted()


_FULL = {errno.ENOSPC, errno.EDQUOT}
_FREE_SPACE = " (the disk is full: free space on it, then run the same command again)"


def _fail(ctx: click.Context, message: str) -> None:
    """``error: message`` on stderr (and in ``--json``), exit status 2."""
    click.echo(f"error: {message}", err=True)
    _json_failure(ctx, message, 2)
    sys.exit(2)


@click.group(cls=_Group)
# The program's version. A pipeline version is eval's argument (`ragtrack eval v5`; `eval --version v5`,
# the older spelling, still works), so the line says which version it is.
@click.version_option(
    package_name="ragtrack",
    message="ragtrack %(version)s (the program; a pipeline version is eval's argument: ragtrack eval v5)",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    help="Project root (holds pipelines/, golden/, mlruns/, ragtrack.toml).  [default: the nearest folder, "
    "this one or above, with a ragtrack.toml or a pipelines/ folder; else this one]",
)
@click.pass_context
def main(ctx: click.Context, root: str) -> None:
    """Prove that version N+1 of your RAG agent is better than version N.

    \b
    Typical session:
      ragtrack golden validate          # check the golden set against the corpus
      ragtrack eval --version v1        # answer + score every golden item, log to MLflow
      ragtrack eval --version v5
      ragtrack compare v1 v5            # side by side, per type, with confidence intervals
      ragtrack promote v5               # move the 'champion' alias if v5 wins
      ragtrack ui                       # open the MLflow UI on this project's store

    \b
    Exit status, for scripts and CI:
      0  done (promote: promoted, or already the champion)
      1  a verdict against you: promote refused, golden set not ready, audit failed,
         eval stopped early or got no answer (or no judge verdict) at all
      2  bad input, configuration or store: one line on stderr, file:line where there is one
      130 / 143  interrupted (Ctrl-C / SIGTERM): an eval keeps its items and resumes
    Progress goes to stderr, results to stdout.
    """
    _quiet_libraries()
    if not _exit_at_once and gc.get_freeze_count() == 0:  # a caller's own freeze is left alone
        ctx.call_on_close(gc.unfreeze)
    for c in (console, err):
        if not c.is_terminal:  # a pipe or a CI log: print tables whole, never cut to 80 columns
            c.width = MACHINE_WIDTH
    if root is None:
        from ragtrack.config import find_root

        found = find_root()
        ctx.obj = {"root": str(found or "."), "outside": found is None}
    else:
        ctx.obj = {"root": root, "outside": False}


def project_root(ctx: click.Context) -> str:
    """The root for a command that reads the project's store (``versions``, ``compare``, ``promote``,
    ``ui``); outside any project one line and exit 2: asked there, they would report that nothing was
    evaluated. Checked by the command, not the group, so ``--help`` works anywhere."""
    if ctx.obj["outside"]:
        click.echo(
            "error: not in a ragtrack project (no ragtrack.toml or pipelines/ here or above); "
            "cd into one, pass --root, or start one with `ragtrack init`",
            err=True,
        )
        sys.exit(2)
    return ctx.obj["root"]


def warn(text: object, label: str = "warning:", style: str = "yellow") -> None:
    """``label text`` on stderr, the label coloured; the text is data (a heading, a file name), printed
    as written even where it looks like rich markup (``[/v1/chat]``)."""
    err.print(f"[{style}]{label}[/] {escape(str(text))}", highlight=False)


def stage(text: str) -> None:
    """``… text`` on stderr, dimmed: a step that takes seconds (loading a model, building an index)."""
    err.print(f"[dim]… {escape(text)}[/]", highlight=False)


def show(*renderables) -> None:
    """Print each table that exists (report functions return None when there is nothing to show)."""
    for r in renderables:
        if r is not None:
            console.print(r)


# Each module adds its commands to ``main``.
from ragtrack.cli import (  # noqa: E402, F401
    corpus,
    decisions,
    evaluate,
    golden,
    judge,
    labels,
    logs,
    monitor,
    platforms,
    project,
    serve,
    triage,
)
