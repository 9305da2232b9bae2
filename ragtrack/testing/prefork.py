"""A pre-imported ``ragtrack`` for the tests that run the docs' shell walkthroughs.

Each ``ragtrack`` line of a walkthrough must stay a process of its own — its own arguments, working
folder, environment, standard streams and exit status, as in a user's shell — but what such a test checks
is what the line prints, not how Python starts. Starting one costs seconds of CPU importing MLflow, torch
and ragtrack (most of a short command). So a server imports them once and forks a child per command: the
``ragtrack`` the walkthrough's shell finds is a small client that hands the server its arguments, folder,
environment and its three standard streams (file descriptors over a Unix socket), and exits with the
command's status. Tests about process start-up or signals start ``python -m ragtrack.cli`` themselves.

The server is single-threaded and forks only from its main thread; per command it forks a waiter, which
forks the command and reports its exit status, so the command ends as a process does (atexit callbacks,
MLflow's trace export, flushed streams) and nothing lingers in the server.

    python -m ragtrack.testing.prefork SOCKET    # prints "ready" once it listens
    python -S ragtrack/testing/prefork.py --client SOCKET ARGS...    # one command, as `ragtrack ARGS`
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

# What a command imports anyway; importing them here is what each command is spared.
PRELOAD = ("ragtrack.cli", "ragtrack.api", "mlflow", "mlflow.genai", "sentence_transformers", "faiss")
_STATUS = struct.Struct("!i")


def serve(path: str) -> None:
    """Import ``PRELOAD``, listen on the Unix socket ``path`` and run one forked command per connection."""
    import gc
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()  # what the commands share stays shared: no collection touches (and so copies) its pages
    # Stopped by SIGTERM once the tests are done; it then waits for the waiters it has not reaped yet.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server_pid = os.getpid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    try:
        while True:
            conn, _ = server.accept()
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _wait_for_command(conn)  # ends the waiter; the command's process leaves by SystemExit
            conn.close()
            _reap(block=False)
    finally:
        if os.getpid() == server_pid:  # not in a command's process, which unwinds through here
            _reap(block=True)


def _reap(block: bool) -> None:
    """Wait for finished waiters: a waiter (and the command it waited for) counts in this process's
    children's CPU time, and so in the test's that started this server (the suite's CPU budget)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _wait_for_command(conn: socket.socket) -> None:
    """In the waiter: receive a command, fork it, send its exit status back and exit. The command's own
    process takes over the client's streams, folder and environment, and ends by the command's SystemExit."""
    header, fds = _receive(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(header["cwd"])
        sys.path[0] = header["cwd"]  # `python -m` puts the working folder first
        os.environ.clear()
        os.environ.update(header["env"])
        _run_cli(header["argv"])
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    conn.sendall(_STATUS.pack(code if code >= 0 else 128 - code))  # killed by signal N: 128 + N, as a shell says
    os._exit(0)


def _run_cli(argv: list[str]) -> None:
    """``python -m ragtrack.cli ARGV`` in this process: raises the SystemExit that ends it."""
    import runpy

    sys.argv = ["ragtrack", *argv]
    runpy.run_module("ragtrack.cli", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    (size,) = struct.unpack("!I", data)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the client hung up mid-command")
        body += chunk
    return json.loads(body), list(fds)


def client(path: str, argv: list[str]) -> int:
    """Run ``ragtrack ARGV`` in the server at ``path`` with this process's streams, folder and
    environment; its exit status (1 if the command's process died without one)."""
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendmsg(
            [struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))]
        )
        conn.sendall(body)
        status = b""
        while len(status) < _STATUS.size:
            chunk = conn.recv(_STATUS.size - len(status))
            if not chunk:
                return 1
            status += chunk
    return _STATUS.unpack(status)[0]


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        sys.exit(client(sys.argv[2], sys.argv[3:]))
    serve(sys.argv[1])
