"""Nothing leaks, nothing hangs, nothing is counted twice: bad input, dead stores, interruptions.

Every case here was found by a fault campaign against ragtrack and is kept as a test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ragtrack.api import evaluate
from ragtrack.api.evaluation import EvalOptions, finish_eval, prepare_eval, run_eval
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.errors import InputError, RagtrackError
from ragtrack.golden import load_golden
from ragtrack.llm.fake_server import FakeOpenAIServer
from ragtrack.tracking import traces
from ragtrack.tracking.store import open_store

from .conftest import DATA, REPO


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


# ---------------------------------------------------------------- input files


def test_a_golden_file_with_a_byte_order_mark_loads(tiny_corpus, tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / "golden.jsonl").read_bytes())
    assert len(load_golden(path, tiny_corpus)) == 5


@pytest.mark.parametrize(
    ("content", "where", "guess"),
    [
        (b"# Title\n\nCaf\xe9 cr\xe8me\n", "3: not UTF-8 text (byte 12:", ""),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "1: not UTF-8 text (byte 0:", ""),
        ("# 说明\n\n网关的默认端口是 8080。\n".encode("gbk"), "1: not UTF-8 text (byte 4:", "reads as GBK/GB18030"),
        ("# 说明\n".encode("utf-16"), "1: not UTF-8 text (byte 0:", "UTF-16 (a byte-order mark)"),
        # After a UTF-8 BOM: the offset counted from after the BOM named b'c' and the BOM's own byte
        (b"\xef\xbb\xbf# caf\xe9\n", "1: not UTF-8 text (byte 8: b'\\xe9')", ""),
        (b"\xef\xbb\xbf" + "# 说明\n".encode("gbk"), "1: not UTF-8 text (byte 7:", "reads as GBK/GB18030"),
    ],
    ids=["latin1", "binary", "gbk", "utf-16", "bom-latin1", "bom-gbk"],
)
def test_undecodable_corpus_files_are_one_error_naming_file_line_and_byte(tmp_path, content, where, guess):
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "doc.md").write_bytes(content)
    with pytest.raises(InputError) as e:
        load_corpus(tmp_path / "kb")
    assert str(e.value).startswith(f"{tmp_path / 'kb' / 'doc.md'}:{where}")
    assert guess in str(e.value) and str(e.value).endswith("save it as UTF-8")


def test_every_undecodable_file_of_a_folder_is_reported_at_once(tmp_path):
    """`init` stopped at the first GBK file: one file per run, in a folder of many."""
    (tmp_path / "kb").mkdir()
    for name in ("a.md", "b.txt"):
        (tmp_path / "kb" / name).write_bytes("# 说明\n\n网关的默认端口是 8080。\n".encode("gbk"))
    (tmp_path / "kb" / "c.md").write_text("# Fine\n\nReadable text.\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_corpus(tmp_path / "kb")
    assert [p.file.rsplit("/", 1)[-1] for p in e.value.problems] == ["a.md", "b.txt"]


def test_files_written_through_a_temporary_file_are_as_readable_as_a_plain_write(tmp_path):
    """A temporary file is created private (0600); a golden set or spec must not stay so for a team."""
    from ragtrack.files import atomic_folder, atomic_write_text

    (tmp_path / "plain.jsonl").write_text("")
    (tmp_path / "plain").mkdir()
    atomic_write_text(tmp_path / "new.jsonl", "{}\n")
    assert (tmp_path / "new.jsonl").stat().st_mode == (tmp_path / "plain.jsonl").stat().st_mode
    (tmp_path / "shared.jsonl").write_text("")
    (tmp_path / "shared.jsonl").chmod(0o664)
    atomic_write_text(tmp_path / "shared.jsonl", "{}\n")  # a file replaced keeps its mode
    assert (tmp_path / "shared.jsonl").stat().st_mode & 0o777 == 0o664
    with atomic_folder(tmp_path / "index") as folder:
        (folder / "x").write_text("")
    assert (tmp_path / "index").stat().st_mode == (tmp_path / "plain").stat().st_mode


def test_config_values_are_checked_when_loaded(project):
    (project / "ragtrack.toml").write_text('[prices."deepseek-chat"]\ninput = "0.27"\noutput = 1.1\n')
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "1")
    assert result.exit_code == 2 and "prices.deepseek-chat.input" in result.output and "Traceback" not in result.output
    assert not (project / "mlruns").exists(), "nothing ran before the config was checked"
    (project / "ragtrack.toml").write_text('[eval]\njudge = "ofline"\n')  # a typo is named where it was made
    result = cli("--root", str(project), "golden", "validate")
    assert result.exit_code == 2 and "ragtrack.toml:2: eval.judge: unknown LLM 'ofline'" in result.output


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        (
            "[eval]\nmax_concurrency = 4\nmin_concurrency = 8\n",
            "ragtrack.toml:3: eval.min_concurrency: min_concurrency (8) is above max_concurrency (4)",
        ),
        (
            '[eval]\nmin_concurrency = 8\n[profiles.local]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
            "max_concurrency = 2\n",
            "ragtrack.toml:3: profiles.local.min_concurrency: min_concurrency (8) is above max_concurrency (2)",
        ),
    ],
    ids=["eval", "profile under eval's floor"],
)
def test_a_concurrency_floor_above_its_ceiling_is_named_not_clamped(project, toml, said):
    (project / "ragtrack.toml").write_text(toml)
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "1")
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output, result.output


# ---------------------------------------------------------------- stores that are not there


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--version", "v1"],
        ["compare", "v1", "v2"],
        ["promote", "v1"],
        ["versions"],
        ["golden", "retire", "v1"],
        ["judge", "calibrate", "--cases", str(REPO / "golden" / "calibration" / "calibration.jsonl")],
    ],
    ids=lambda c: c[0] if c[0] != "golden" else "golden-retire",
)
@pytest.mark.parametrize("uri", ["http://127.0.0.1:9", "foo://bar"], ids=["unreachable", "unsupported"])
def test_a_dead_or_unsupported_store_is_one_line_for_every_command(project, command, uri):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ragtrack.cli", "--root", str(project), *command, "--tracking-uri", uri],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a speed measurement
    )
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if not line.startswith("… ")]  # progress is on stderr too
    assert "Traceback" not in done.stderr and len(said) == 1, done.stderr
    assert ("does not answer" if uri.startswith("http") else "unsupported tracking URI") in done.stderr
    assert not (project / ".ragtrack" / "cache" / "index").exists(), "no index was built before the store check"
    print(f"{command[0]}: {time.monotonic() - started:.1f}s")


# ---------------------------------------------------------------- run lifecycle


def runs_of(project):
    store = open_store(load_config(project))
    return store, store.client.search_runs([store.experiment_id], order_by=["attributes.start_time ASC"])


def test_an_error_while_logging_ends_the_run_failed_and_keeps_the_checkpoint(project, monkeypatch):
    from ragtrack.tracking import runs

    def broken(*args, **kwargs):  # a store write failing after every item was scored
        raise OSError("disk full")

    # A mock, because a failing artifact write cannot be produced for real here (root ignores permissions).
    monkeypatch.setattr(runs, "record_eval", broken)
    with pytest.raises(OSError):
        evaluate("v1", root=project)
    store, found = runs_of(project)
    assert [r.info.status for r in found] == ["FAILED"]
    checkpoints = list((project / ".ragtrack" / "checkpoints").glob("*.jsonl"))
    assert len(checkpoints) == 1 and len(checkpoints[0].read_text().splitlines()) == 6  # header + 5 items
    monkeypatch.undo()
    report = evaluate("v1", root=project)
    assert report.resumed == 5 and report.complete and report.run_id == found[0].info.run_id


def test_fresh_closes_the_interrupted_run_instead_of_leaving_it_running(project):
    session = prepare_eval("v1", EvalOptions(root=project))  # started, then abandoned (as after a SIGKILL)
    store = session.store
    assert store.run_status(session.run_id) == "RUNNING"
    with pytest.raises(RagtrackError, match="another eval with the same version, golden set and judge is running"):
        evaluate("v1", root=project)  # while it runs, a second eval does not take its checkpoint
    session.checkpoint.release()  # as its process's end does
    report = evaluate("v1", root=project, fresh=True)
    assert store.run_status(session.run_id) == "KILLED" and report.run_id != session.run_id and report.resumed == 0


def test_a_resumed_run_logs_each_metric_once_and_reports_the_whole_eval(project, monkeypatch):
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-0000000000")
        session = prepare_eval("v1", EvalOptions(root=project, judge="openai:m", limit=5, use_cache=False))
        stop_after = {"n": 0}

        def crash(record):
            stop_after["n"] += 1
            if stop_after["n"] == 2:
                raise KeyboardInterrupt

        from ragtrack.api.evaluation import Progress, ends_run_on_error

        with pytest.raises(KeyboardInterrupt), ends_run_on_error(session):
            run_eval(session, Progress(on_item=crash))
        assert session.store.run_status(session.run_id) == "KILLED"

        again = prepare_eval("v1", EvalOptions(root=project, judge="openai:m", limit=5, use_cache=False))
        outcome = run_eval(again)
        report = finish_eval(again, outcome)
        finish_eval(again, outcome)  # a second finish, as after a kill during final logging
    assert outcome.resumed == 2 and report.complete and again.run_id == session.run_id
    # 5 items x 4 judges: the first process's 8 calls are counted too, not only the last 12.
    assert report.accounting["judge"]["total"]["calls"] == 20
    history = again.store.client.get_metric_history(again.run_id, "correctness")
    assert len(history) == 1, "a metric logged again with the same value adds no history point"


def lines_of(path) -> list[str]:
    """The lines of a checkpoint, or none if it went between the glob and the read: the eval's
    writability probe creates the file and removes it at once when no checkpoint existed."""
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def wait_for_items(proc: subprocess.Popen, project, n: int):
    """Wait until the eval in ``proc`` has checkpointed ``n`` items; returns the checkpoint folder."""
    checkpoints = project / ".ragtrack" / "checkpoints"
    deadline = time.monotonic() + 300
    while not any(len(lines_of(p)) > n for p in checkpoints.glob("*.jsonl")):  # header + n items
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.02)
    return checkpoints


@pytest.mark.slow  # `ragtrack` processes signalled or run at once
def test_sigterm_ends_the_run_killed_within_seconds_and_keeps_finished_items(project):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrack.cli",
            "--root",
            str(project),
            "eval",
            "--version",
            "v3",
            "--json",
            str(project / "out.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},  # set by earlier tests' stores
    )
    checkpoints = wait_for_items(proc, project, 2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    store, found = runs_of(project)
    assert [r.info.status for r in found] == ["KILLED"]
    kept = [json.loads(line) for p in checkpoints.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert sum("id" in row for row in kept) >= 2
    said = re.search(r"(\d+) of 5 items finished and kept in the checkpoint", out)
    # As many as the checkpoint holds, counted from it: the signal lands as soon as the second item's line
    # shows, often while that line's fsync still runs (the count of progress callbacks was then one short).
    assert said and int(said[1]) == sum("id" in row for row in kept), out
    written = json.loads((project / "out.json").read_text())  # --json says how far it got, too
    assert written["exit_status"] == 143 and written["items"] == 5 and written["items_kept"] == int(said[1])


def test_an_eval_interrupted_before_its_first_item_leaves_no_checkpoint(project):
    """Interrupted while its index was built, an eval left an empty checkpoint nothing would read."""
    from ragtrack.api import Progress

    def interrupt(stage: str) -> None:
        if stage.startswith("building"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate("v1", root=project, progress=Progress(on_stage=interrupt))
    assert not list((project / ".ragtrack" / "checkpoints").glob("*"))


# What an eval does first: open the store, register its version.
OPEN_AND_REGISTER = """
import sys
from pathlib import Path
from ragtrack.config import load_config
from ragtrack.spec import load_spec
from ragtrack.tracking.models import ensure_version_model
from ragtrack.tracking.store import open_store
root = Path(sys.argv[1])
store = open_store(load_config(root), sys.argv[2])
ensure_version_model(store, load_spec("v1", root / "pipelines", root), str(root / "golden" / "kb"), str(root))
"""


@pytest.mark.slow  # `ragtrack` processes signalled or run at once
def test_evals_starting_together_on_a_new_store_set_it_up_and_register_their_version_once(project, tmp_path):
    """Both created and migrated the new SQLite file's tables at once: "duplicate column name",
    alembic errors, tracebacks with exit 1, and a file later commands could not open (4 of 4
    runs); and both found no model version of the spec, registering two."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    command = [sys.executable, "-c", OPEN_AND_REGISTER, str(project), uri]
    procs = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    versions = MlflowClient(uri, registry_uri=uri).search_model_versions("name = 'rag-agent'")
    assert len(versions) == 1, [v.version for v in versions]
    assert cli("--root", str(project), "versions", "--tracking-uri", uri).exit_code == 0


# ---------------------------------------------------------------- SIGKILL, then resume

# Run in a child process: an eval whose final logging is SIGKILLed as the third item's trace (with
# its assessments) is written — two traces complete, the other three items untraced. Trace export
# is made synchronous so that the moment is exact. The kill is real; its moment is
# injected, because no outside observer can hit that window reliably.
KILL_WHILE_LOGGING = """
import os, signal, sys
os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"
from mlflow.tracing.client import TracingClient
from ragtrack.api import evaluate

start_trace, done = TracingClient.start_trace, []

def start_trace_then_die(self, trace_info):
    if len(done) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(trace_info.trace_id)
    return start_trace(self, trace_info)

TracingClient.start_trace = start_trace_then_die
evaluate("v1", root=sys.argv[1], judge="openai:m", use_cache=False)
"""


def _child_env(server: FakeOpenAIServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # set by earlier tests' stores
    return {**env, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-loopback-0000000000"}


def _resume_and_check(project, server: FakeOpenAIServer, monkeypatch) -> None:
    """Resume in this process; the run must hold one complete trace per item and the whole eval's accounting."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-0000000000")
    report = evaluate("v1", root=project, judge="openai:m", use_cache=False)
    assert report.complete
    store, found = runs_of(project)
    assert [r.info.run_id for r in found] == [report.run_id], "the resumed run is the killed one"
    by_item = traces.item_traces(store, report.run_id)
    assert sorted(by_item) == sorted(r.id for r in report.records)
    assert all(len(infos) == 1 for infos in by_item.values()), {k: len(v) for k, v in by_item.items()}
    for infos in by_item.values():
        names = {a.name for a in infos[0].assessments}
        assert {traces.judge_feedback(j) for j in ("correctness", "groundedness")} <= names
    # 5 items x 4 judges, whichever process made the calls.
    assert report.accounting["judge"]["total"]["calls"] == 20
    assert len(store.client.get_metric_history(report.run_id, "correctness")) == 1


@pytest.mark.slow  # `ragtrack` processes signalled or run at once
def test_sigkill_during_item_work_resumes_to_one_trace_per_item_and_the_whole_accounting(project, monkeypatch):
    # One call at a time: items finish about 0.8 s apart, so the kill lands with items both done and to do.
    with FakeOpenAIServer(latency_s=0.2, capacity=1) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragtrack.cli", "--root", str(project), "eval", "--version", "v1"]
            + ["--judge", "openai:m", "--no-cache"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_child_env(server),
        )
        checkpoints = wait_for_items(proc, project, 2)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        kept = [line for p in checkpoints.glob("*.jsonl") for line in p.read_text().splitlines()]
        assert 3 <= len(kept) < 6, "killed with items both done and to do"
        _resume_and_check(project, server, monkeypatch)


@pytest.mark.slow  # `ragtrack` processes signalled or run at once
def test_sigkill_during_final_logging_resumes_to_one_trace_per_item(project, monkeypatch):
    with FakeOpenAIServer() as server:
        proc = subprocess.run(
            [sys.executable, "-c", KILL_WHILE_LOGGING, str(project)],
            capture_output=True,
            text=True,
            env=_child_env(server),
            timeout=300,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
        store, found = runs_of(project)
        assert [r.info.status for r in found] == ["RUNNING"]  # nobody could close it
        half = traces.item_traces(store, found[0].info.run_id)
        complete = {item for item, infos in half.items() if any(i.assessments for i in infos)}
        assert len(complete) == 2, "two traces written whole before the kill"
        _resume_and_check(project, server, monkeypatch)


def test_places_that_cannot_be_written_fail_in_one_line_or_cost_only_the_cache(project, caplog):
    """A folder in the way is a write fault even root meets (file modes do not stop root)."""
    from ragtrack.llm.cache import JsonCache

    (project / "mlruns").mkdir()
    (project / "mlruns" / "mlflow.db").mkdir()  # the store's file cannot be opened
    started = time.monotonic()
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "1")
    assert result.exit_code == 2 and "cannot open the store" in result.output and "Traceback" not in result.output
    assert time.monotonic() - started < 20, "one probe, not a minute of MLflow's retries"
    (project / "mlruns" / "mlflow.db").rmdir()

    (project / ".ragtrack").mkdir()
    (project / ".ragtrack" / "checkpoints").write_text("")  # no checkpoint, no resume: refused first
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "1")
    assert result.exit_code == 2 and "cannot write the eval's checkpoint" in result.output
    assert "index" not in os.listdir(project / ".ragtrack"), "refused before the index was built"
    (project / ".ragtrack" / "checkpoints").unlink()

    (project / ".ragtrack" / "cache").mkdir()
    (project / ".ragtrack" / "cache" / "index").write_text("")  # an index cache that cannot be written
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert any("cannot cache the index" in r.getMessage() for r in caplog.records)

    cache = JsonCache(project / ".ragtrack" / "cache" / "index")  # a reply cache whose folder is a file
    cache.put_json("ab" * 32, {"x": 1})
    cache.put_json("cd" * 32, {"x": 2})
    assert cache.get_json("ab" * 32) is None
    assert sum("cannot write the reply cache" in r.getMessage() for r in caplog.records) == 1, "reported once"


def test_a_checkpoint_lock_taken_on_the_file_its_holder_just_removed_is_taken_again(tmp_path, monkeypatch):
    """An eval that opened the lock file just before its holder removed it and let go got a lock on the
    removed file, while an eval starting next created a new file and locked that: both held "the"
    checkpoint. The interleaving (open, then the holder's release, then flock) is forced by running the
    holder's release inside the first flock: milliseconds apart, it cannot be produced on demand."""
    import fcntl

    from ragtrack import files
    from ragtrack.evaluation.runner import Checkpoint

    path = tmp_path / "checkpoints" / "v1-abc.jsonl"
    first = Checkpoint(path)
    first.hold()
    real_flock, calls = fcntl.flock, []

    def flock_after_release(fd, flags):
        calls.append(flags)
        if len(calls) == 1:
            first.release()  # the holder removes the file and lets go between open and flock
        return real_flock(fd, flags)

    monkeypatch.setattr(files.fcntl, "flock", flock_after_release)
    second = Checkpoint(path)
    second.hold()
    monkeypatch.setattr(files.fcntl, "flock", real_flock)
    assert len(calls) == 2, "the lock on the removed file was let go and the new file taken"
    third = Checkpoint(path)
    with pytest.raises(RagtrackError, match="another eval with the same version"):
        third.hold()  # the lock file on disk is the one the second eval holds
    second.release()


def test_a_run_whose_traces_the_store_lost_is_left_unfinished_and_the_same_command_finishes_it(project, monkeypatch):
    """On a full disk MLflow's trace exporter warned and went on: the run was closed complete with 3 of 8
    item traces. A trace lost without an error is forced here (one deleted as the batch is written): a
    store that drops a write silently cannot be arranged in a test."""
    from ragtrack.tracking.trace_writer import TraceBatch

    real_write, lost = TraceBatch.write, []

    def write_losing_one(self, experiment_id, traces=None):
        written = real_write(self, experiment_id, traces)
        if not lost and written:
            self.client.delete_traces(experiment_id, trace_ids=written[:1])
            lost.append(written[0])
        return written

    monkeypatch.setattr(TraceBatch, "write", write_losing_one)
    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "3")
    assert result.exit_code == 2 and "kept no trace of 1 of 3 items" in result.output, result.output
    assert "MLflow gave no reason" in result.output and "disk" not in result.output  # no guess at a full disk
    store, found = runs_of(project)
    assert [r.info.status for r in found] == ["FAILED"] and found[0].data.tags["ragtrack.complete"] == "false"

    result = cli("--root", str(project), "eval", "--version", "v1", "--limit", "3")  # the same command
    assert result.exit_code == 0, result.output
    store, again = runs_of(project)
    assert [r.info.run_id for r in again] == [found[0].info.run_id] and again[0].info.status == "FINISHED"
    assert sorted(traces.item_traces(store, found[0].info.run_id)) == sorted(
        r.id for r in store.records(found[0].info.run_id)
    )


@pytest.mark.parametrize(
    ("said", "told"),
    [
        (
            ["Failed to log trace to the trace server. Error: [Errno 28] No space left on device: '/m/traces'."],
            "the disk is full (Failed to log trace to the trace server. Error: [Errno 28] No space left on "
            "device: '/m/traces'.): free space on it",
        ),
        (
            ["Failed to log trace to the trace server. Error: (sqlite3.OperationalError) database or disk is full."],
            "the disk is full (Failed to log trace to the trace server. Error: (sqlite3.OperationalError) "
            "database or disk is full.): free space on it",
        ),
        (
            ["Failed to log trace to the trace server. Error: (sqlite3.OperationalError) database is locked.", "x"],
            "its SQLite database was locked by another writer for longer than SQLite waits (another pull or "
            "eval): not a full disk; run one at a time, or use a database server for a shared store",
        ),
        (
            ["(sqlite3.OperationalError) attempt to write a readonly database", "x"],
            "MLflow said: (sqlite3.OperationalError) attempt to write a readonly database (and 1 more error(s))",
        ),
        ([], "MLflow gave no reason"),
    ],
    ids=["enospc", "sqlite-full", "locked", "read-only", "nothing"],
)
def test_a_lost_trace_write_is_blamed_on_a_full_disk_only_when_mlflow_said_so(said, told):
    from ragtrack.tracking.export_failures import cause

    assert cause(said) == told


# ---------------------------------------------------------------- round 2: the last tracebacks


def nothing_written(project) -> bool:
    return not (project / "mlruns").exists() and not (project / ".ragtrack").exists()


@pytest.mark.parametrize("name", [b"bad\xff\xfe.md", "说明.md".encode("gbk")], ids=["bytes", "gbk"])
def test_a_corpus_file_whose_name_is_not_utf8_is_reported_by_every_command(project, name):
    """It crashed corpus.digest (UnicodeEncodeError). Reported, not skipped: a skipped file's passages
    would vanish from the corpus while the golden set may cite them."""
    with open(os.fsencode(project / "golden" / "kb") + b"/" + name, "wb") as f:
        f.write(b"# Title\n\nSome text.\n")
    for command in (["golden", "validate"], ["corpus", "ls"], ["eval", "v1"]):
        result = cli("--root", str(project), *command)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        line = next(x for x in result.output.splitlines() if x.startswith("error:"))
        assert "the file name is not UTF-8" in line and "rename it" in line
        assert os.fsdecode(name)[:1] in line or "\\x" in line
    assert nothing_written(project)


def test_a_golden_line_with_a_lone_surrogate_names_file_line_and_field(project):
    golden = project / "golden" / "golden.jsonl"
    lines = golden.read_text().splitlines()
    lines[1] = lines[1].replace('"question": "', '"question": "\\ud800', 1)
    golden.write_text("\n".join(lines) + "\n")
    for command in (["golden", "validate"], ["eval", "v1"]):
        result = cli("--root", str(project), *command)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"error: {golden}:2: question: holds a lone surrogate escape" in result.output
    assert nothing_written(project)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_passage_file_with_a_lone_surrogate_names_file_line_and_field(tmp_path, suffix):
    row = '{"id": "p1", "text": "ok \\udc00 text"}'
    path = tmp_path / f"passages{suffix}"
    path.write_text(row + "\n" if suffix == ".jsonl" else f"[\n{row}\n]\n")
    with pytest.raises(InputError) as e:
        load_corpus(path)
    assert str(e.value).startswith(f"{path}:{1 if suffix == '.jsonl' else 2}: text: holds a lone surrogate")


def test_a_prompt_that_is_a_loop_of_symbolic_links_is_one_line(project):
    prompts = project / "pipelines" / "prompts"
    (prompts / "loopA.md").symlink_to("loopB.md")
    (prompts / "loopB.md").symlink_to("loopA.md")
    spec = project / "pipelines" / "v1.toml"
    spec.write_text(spec.read_text().replace("prompts/answer_plain.md", "prompts/loopA.md"))
    result = cli("--root", str(project), "eval", "v1")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"error: {spec}:" in result.output
    assert "prompts.answer: prompts/loopA.md is a loop of symbolic links" in result.output
    assert nothing_written(project)


@pytest.mark.parametrize(
    ("version", "prompt", "text", "said"),
    [
        ("v1", "answer_plain.md", "", "is empty (the answer step needs {{question}}, {{contexts}})"),
        ("v1", "answer_plain.md", "Answer briefly.\n", "lacks {{question}}, which the answer step needs; lacks"),
        (
            "v1",
            "answer_plain.md",
            "Question: {{question}}\nContexts: {{contxt}}\n",
            "names {{contxt}}, which the answer step does not fill (did you mean {{contexts}}?); "
            "lacks {{contexts}}, which the answer step needs",
        ),
        (
            "v1",
            "answer_plain.md",
            "Question: {question}\nContexts: {{contexts}}\n",
            "names {question}, which the answer step does not fill (a placeholder has double braces: {{question}})",
        ),
        # v4 drafts an outline: an answer prompt that never shows it would drop it silently
        ("v4", "answer_outline.md", "{{question}}\n{{contexts}}\n", "lacks {{outline}}, which the answer step"),
        ("v4", "outline.md", "{{question}} {{outline}}\n", "names {{outline}}, which the outline step does not"),
    ],
    ids=["empty", "no-placeholders", "unknown", "single-braces", "outline-unused", "wrong-step"],
)
def test_a_prompt_that_would_not_show_its_step_inputs_is_refused_when_the_spec_loads(
    project, version, prompt, text, said
):
    """With --llm such a prompt was sent as it was: the model answered without the question or the contexts."""
    (project / "pipelines" / "prompts" / prompt).write_text(text)
    spec = project / "pipelines" / f"{version}.toml"
    step = next(
        line.split("=")[0].strip() for line in spec.read_text().splitlines() if line.endswith(f'"prompts/{prompt}"')
    )
    result = cli("--root", str(project), "eval", version, "--llm", "openai:gpt-4o-mini")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {spec}:") and f": prompts.{step}: prompts/{prompt} " in line, line
    assert said in line, line
    takes = {"answer": "{{question}}, {{contexts}}, {{outline}}", "outline": "{{question}}, {{topics}}"}[step]
    assert line.endswith(f"the {step} step takes {takes}"), line
    assert nothing_written(project)


def test_a_full_disk_names_the_file_and_the_way_out(project, monkeypatch):
    """A full disk cannot be made here, so ENOSPC is injected (a mock) where a write hits the disk:
    the checkpoint's append, which fails in write() and so names no file by itself."""
    import errno as errno_module

    from ragtrack.evaluation import runner

    def full(self, row):
        raise runner.named(OSError(errno_module.ENOSPC, os.strerror(errno_module.ENOSPC)), self.path)

    monkeypatch.setattr(runner.Checkpoint, "_append", full)
    result = cli("--root", str(project), "eval", "v1", "--limit", "1")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("error:"))
    assert line.startswith("error: No space left on device: ") and ".ragtrack/checkpoints/" in line
    assert line.endswith("(the disk is full: free space on it, then run the same command again)")


def test_atomic_writes_name_their_file_not_the_temporary_one(tmp_path, monkeypatch):
    """ENOSPC injected (a mock: no full disk here) into the write of the temporary file."""
    import errno as errno_module

    from ragtrack import files

    def full_fsync(fd):
        raise OSError(errno_module.ENOSPC, os.strerror(errno_module.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full_fsync)
    with pytest.raises(OSError) as e:
        files.atomic_write_text(tmp_path / "golden.jsonl", "x\n")
    assert e.value.errno == errno_module.ENOSPC and e.value.filename == str(tmp_path / "golden.jsonl")
    assert list(tmp_path.iterdir()) == [], "the temporary file is removed"


# An interruption after the command is over: in MLflow's atexit trace export (sent here by an atexit
# callback, so that the moment is exact), or inside a finalizer while the command runs.
SIGNAL_AT_EXIT = """
import atexit, os, signal, sys, time
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30)))
from ragtrack.cli import run
sys.argv = ["ragtrack", "--root", sys.argv[1], "versions"]
run()
"""
SIGNAL_IN_FINALIZER = """
import sys, time
from ragtrack.cli import Terminated, main, run

@main.command("finalize")
def finalize():
    class Finalized:
        def __del__(self):
            raise Terminated()  # what the SIGTERM handler raises, landing in a __del__
    Finalized()
    time.sleep(30)  # the signal sent again lands here
    print("finished")

sys.argv = ["ragtrack", "finalize"]
run()
"""


@pytest.mark.slow  # a `ragtrack` process signalled
@pytest.mark.parametrize("script", [SIGNAL_AT_EXIT, SIGNAL_IN_FINALIZER], ids=["atexit", "finalizer"])
def test_sigterm_outside_the_commands_own_code_is_the_one_line_interrupted(project, script):
    proc = subprocess.run(
        [sys.executable, "-c", script, str(project)], capture_output=True, text=True, timeout=120, cwd=project
    )
    assert proc.returncode == 143, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "interrupted" and "finished" not in proc.stdout
