"""An interrupted golden command never leaves a half-written golden set or candidates file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.cli import main
from ragtrack.llm.fake_server import FakeOpenAIServer

from .test_golden_authoring import DOCS, zh_project


def cli(root: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def accepted(tmp_path: Path) -> Path:
    """A project with four accepted items waiting for answers, and four candidates still in review."""
    root = zh_project(tmp_path / "qinghe")
    assert cli(root, "golden", "propose", *[a for d in DOCS for a in ("--doc", d)]).exit_code == 0
    assert cli(root, "golden", "accept", "--id", "a001", "--id", "b001", "--id", "c001", "--id", "d001").exit_code == 0
    return root


@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["golden", "answer"], "golden.jsonl"),
        (["golden", "propose", "--doc", "faq.md", "--doc", "warranty-policy.md"], "candidates.jsonl"),
    ],
)
def test_killing_an_llm_command_mid_run_leaves_its_file_as_it_was(accepted, command, target):
    """SIGKILL while the endpoint is still answering: a real process, a real slow server."""
    before = (accepted / target).read_bytes()
    with FakeOpenAIServer(latency_s=30.0) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test",
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        }
        args = [sys.executable, "-m", "ragtrack.cli", "--root", str(accepted), *command, "--llm", "openai:slow"]
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not server.log.requests and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.1)
            assert server.log.requests, "the command never reached the endpoint"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
    assert (accepted / target).read_bytes() == before
    assert leftovers(accepted) == []


def test_an_interrupt_during_the_write_itself_keeps_the_old_file(accepted, monkeypatch):
    """Ctrl+C at the moment the new golden set is being flushed. The instant cannot be hit reliably
    from outside, so os.fsync is made to raise KeyboardInterrupt (the one mocked fault here)."""
    import ragtrack.files

    path = accepted / "golden.jsonl"
    before = path.read_bytes()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ragtrack.files.os, "fsync", interrupted)
    result = cli(accepted, "golden", "answer")
    assert result.exit_code == 130 and "interrupted" in result.output
    assert path.read_bytes() == before
    assert leftovers(accepted) == []
