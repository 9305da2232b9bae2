"""README's session runs as written on the shipped project and prints what README shows it printing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import seed_cache
from .readme import output, run_shell, walkthrough

REPO = Path(__file__).resolve().parent.parent


def comparable(line: str) -> str:
    """A line with run, spec and golden IDs (hex) as one placeholder and its spacing collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"\b[0-9a-f]{7,32}\b", "<id>", line)).strip()


@pytest.mark.slow
def test_the_readme_session_runs_and_prints_what_the_readme_shows(tmp_path, shipped, prefork):
    """Over 60 s: README's session is `ragtrack` processes in a shell (the test is about what they print),
    v1 and v5 evaluated on the 48-item shipped set among them; the shipped project's caches spare the
    index builds and the local LLM's replies."""
    project = tmp_path / "project"
    for folder in ("pipelines", "golden"):
        shutil.copytree(REPO / folder, project / folder)
    # The session's own store, but the shipped project's caches (indexes, vectors, answers) and the indexes
    # the tests built over the shipped corpus (v5's too, once one has): the same specs on the same corpus
    # give the same figures from them, without building v1's index again.
    seed_cache(project, REPO / "golden" / "kb")
    shutil.copytree(shipped[0] / ".ragtrack" / "cache", project / ".ragtrack" / "cache", dirs_exist_ok=True)
    done = run_shell("set -e\n" + walkthrough("session"), project, tmp_path, prefork)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    printed = {comparable(line) for line in done.stdout.splitlines()}
    missing = [line for line in output("session") if comparable(line) not in printed]
    assert not missing, "README shows lines the session did not print:\n" + "\n".join(missing)
