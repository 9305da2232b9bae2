"""Agent versions as MLflow models: one LoggedModel + registry version per distinct spec.

A version's model carries the spec (parameters and prompt texts) as params and
artifacts, and is a working pyfunc (``agent_model.py``, logged as code): ``mlflow.pyfunc.load_model(
"models:/rag-agent@champion").predict(["How do I …?"])`` answers with the
champion. An unchanged spec (same hash) reuses its registry version instead
of piling up identical ones.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow

from ragtrack.secrets import ensure_clean
from ragtrack.spec import LoadedSpec
from ragtrack.tracking.store import Store

VERSION_TAG = "ragtrack.version"
SPEC_HASH_TAG = "ragtrack.spec_hash"


@dataclass(frozen=True)
class ModelRef:
    model_id: str
    version: str  # registry version number
    reused: bool


def find_model_version(store: Store, version: str, spec_hash: str | None = None) -> object | None:
    """The newest registry version of ``version`` (optionally with exactly this spec hash)."""
    query = f"name='{store.registered_model}' and tags.`{VERSION_TAG}`='{version}'"
    if spec_hash:
        query += f" and tags.`{SPEC_HASH_TAG}`='{spec_hash}'"
    try:
        found = store.client.search_model_versions(query)
    except mlflow.exceptions.MlflowException:
        return None  # no registered model yet
    return max(found, key=lambda mv: int(mv.version)) if found else None


def ensure_version_model(store: Store, spec: LoadedSpec, corpus_path: str, root: str) -> ModelRef:
    """Log and register ``spec`` as a model unless a registry version with its hash exists."""
    existing = find_model_version(store, spec.name, spec.hash)
    if existing is not None:
        model_id = existing.source.removeprefix("models:/")
        return ModelRef(model_id=model_id, version=str(existing.version), reused=True)

    tags = {VERSION_TAG: spec.name, SPEC_HASH_TAG: spec.hash, "ragtrack.description": spec.spec.version.description}
    files = {
        "spec.json": spec.model_dump_json(indent=1),
        f"{spec.name}.toml": Path(spec.path).read_text("utf-8"),
        "prompts.json": json.dumps(spec.prompts, indent=1, ensure_ascii=False),
    }
    for name, text in files.items():
        ensure_clean(text, f"{spec.name}'s {name}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        spec_file, readable, prompts = (Path(tmp) / name for name in files)
        mlflow.set_experiment(experiment_id=store.experiment_id)
        info = mlflow.pyfunc.log_model(
            name=spec.name,
            python_model=str(Path(__file__).with_name("agent_model.py")),  # models from code: no pickle
            artifacts={"spec": str(spec_file), "spec_toml": str(readable), "prompts": str(prompts)},
            model_config={"corpus": corpus_path, "root": root},
            params=spec.params(),
            tags=tags,
            pip_requirements=["ragtrack"],
            registered_model_name=store.registered_model,
        )
    version = str(info.registered_model_version)
    for key, value in tags.items():
        store.client.set_model_version_tag(store.registered_model, version, key, value)
    return ModelRef(model_id=info.model_id, version=version, reused=False)
