"""Which checkout a run was made from: the commit (MLflow's own source tags, which its UI shows on the
run), the branch, and whether there were uncommitted changes — so a CI run or a promotion links to the
code it measured or decided on."""

from __future__ import annotations

import os
import subprocess

from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT

from ragtrack.tracking.store import Tag


def source_tags(root: str | os.PathLike) -> dict[str, str]:
    """The commit the project is at, as MLflow's own source tags (the UI shows them on the run), and
    whether the checkout had uncommitted changes: a CI run links to the commit it measured. Nothing
    outside a git checkout (or without git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {}
    tags = {MLFLOW_GIT_COMMIT: commit, Tag.GIT_DIRTY: str(bool(git("status", "--porcelain"))).lower()}
    if (branch := git("rev-parse", "--abbrev-ref", "HEAD")) and branch != "HEAD":
        tags[MLFLOW_GIT_BRANCH] = branch
    return tags
