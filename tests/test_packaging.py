"""The metadata a user's ``pip install`` reads: ragtrack installs beside the torch build and on the
Python the user already has, and the wheel carries the files it reads at run time (the built-in
pipelines and prompts ``ragtrack init`` and ``eval`` use). Read from pyproject.toml: building the wheel
takes half a minute (``make dist`` builds it and ``twine check``s it in CI)."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from .conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))


def test_torch_is_a_floor_and_python_has_no_upper_bound():
    requirements = {Requirement(r).name: Requirement(r) for r in PROJECT["project"]["dependencies"]}
    torch = requirements["torch"].specifier
    assert not any(s.operator in ("==", "===", "~=", "<", "<=") for s in torch), torch
    assert torch.contains("2.14.1") and torch.contains("2.13.0")  # the builds on this machine's disk
    python = SpecifierSet(PROJECT["project"]["requires-python"])
    assert all(python.contains(v) for v in ("3.11.9", "3.12.8", "3.13.1")) and not python.contains("3.10.14")


def test_the_wheel_carries_every_file_ragtrack_reads_at_run_time():
    data = PROJECT["tool"]["setuptools"]["package-data"]["ragtrack"]
    tracked = subprocess.run(
        ["git", "ls-files", "ragtrack"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    files = [f.removeprefix("ragtrack/") for f in tracked if not f.endswith(".py")]
    assert any(f.startswith("builtin/") and f.endswith(".toml") for f in files)
    assert any(f.startswith("evaluation/prompts/zh/") for f in files)
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in data)]
    assert not missing, f"in the repository but not in the wheel: {missing}"
