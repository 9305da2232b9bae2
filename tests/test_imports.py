"""Import costs are part of the interface: commands and plugins load only what they use."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "faiss", "langchain_core", "langchain_community", "sentence_transformers", "transformers")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(m for m in sys.modules if '.' not in m)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", ["import ragtrack", "import ragtrack.api", "import ragtrack.cli"])
def test_the_package_api_and_cli_import_neither_mlflow_nor_the_retrieval_stack(statement):
    loaded = loaded_after(statement)
    assert not loaded & {*HEAVY, "mlflow", "scipy", "pandas"}, loaded & {*HEAVY, "mlflow", "scipy", "pandas"}


def test_the_mlflow_evaluator_plugin_does_not_load_the_retrieval_stack():
    loaded = loaded_after("import ragtrack.tracking.evaluator")
    assert "mlflow" in loaded and not loaded & set(HEAVY), loaded & set(HEAVY)


# What a light command loads: its --help, then the command itself, in one process as a user runs them.
LIGHT_COMMAND = """
import sys
from ragtrack.cli import main

def run(args):
    try:
        main(args, standalone_mode=False)
    except SystemExit:
        pass
    print("loaded:", " ".join(sorted(sys.modules)))

run(["versions", "--help"])
run(["--root", sys.argv[1], "versions"])
"""
#: What no light command needs: statistics, plotting, retrieval, and the modules only triage reads.
NOT_FOR_LIGHT_COMMANDS = (
    *HEAVY,
    "scipy.stats",
    "matplotlib",
    "sklearn",
    "faiss",
    "jieba",
    "bm25s",
    "ranx",
    "ragtrack.production.similarity",
    "ragtrack.production.triage",
    "ragtrack.pipeline.agent",
)


def test_a_light_command_imports_only_what_it_uses(project):
    """`ragtrack versions` started at 1.73x a bare `import mlflow` once an eval module imported scipy.stats
    and the CLI's golden commands imported triage and the question embedder for their --help."""
    from ragtrack.config import load_config
    from ragtrack.tracking.store import open_store

    open_store(load_config(project))  # a store with nothing registered: the command reads it and says so
    out = subprocess.run(
        [sys.executable, "-c", LIGHT_COMMAND, str(project)], capture_output=True, text=True, check=True
    ).stdout
    helped, ran = [set(line.split()[1:]) for line in out.splitlines() if line.startswith("loaded: ")]
    assert "no versions registered yet" in out
    assert not helped & {"mlflow", "numpy", "pandas", "sqlalchemy", "ragtrack.evaluation", *NOT_FOR_LIGHT_COMMANDS}
    assert "mlflow" in ran and "ragtrack.api.listing" in ran, "the command did run"
    assert not ran & set(NOT_FOR_LIGHT_COMMANDS), ran & set(NOT_FOR_LIGHT_COMMANDS)
