"""What a newcomer sees when following README in order: `make eval` evaluates a version before the
session does, and model version numbers follow the order of first evaluation — the docs say so."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_model_versions_are_numbered_in_the_order_versions_are_first_evaluated(project, tmp_path):
    """`make eval` (v5) then README's session (v1 first): v5 is model version 1, v1 is 2."""
    from ragtrack.config import load_config
    from ragtrack.spec import load_spec
    from ragtrack.tracking.models import ensure_version_model
    from ragtrack.tracking.store import open_store

    store = open_store(load_config(project), f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}")

    def register(version: str):
        spec = load_spec(version, project / "pipelines", project)
        return ensure_version_model(store, spec, str(project / "golden" / "kb"), str(project))

    first, second, again = register("v5"), register("v1"), register("v5")
    assert (first.version, second.version) == ("1", "2")
    assert again.version == "1" and again.reused


def test_readme_and_getting_started_say_what_make_eval_does_to_the_numbering():
    default = re.search(r"^VERSION \?= (\S+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M).group(1)
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    started = " ".join((REPO / "docs" / "getting-started.md").read_text(encoding="utf-8").split())
    said = f"{default} is model version 1 and v1 is 2"
    assert f"`make eval` evaluates {default} first" in readme and said in readme
    assert said in started
    # The session's printed lines are those of a store whose first version was v1.
    assert "promoted over v1 (model version 1)" in readme
