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
