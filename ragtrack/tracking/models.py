"""Agent versions as MLflow models: one LoggedModel + registry version per distinct spec.

A version's model carries the spec (parameters and prompt texts) as params and
artifacts, and is a working pyfunc (``agent_model.py``, logged as code):
``mlflow.pyfunc.load_model("models:/rag-agent@champion").predict(["How do I …?"])``
answers with the champion, whatever kind of agent it is. An unchanged spec
(same hash) reuses its registry version instead of piling up identical ones.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException

from ragtrack.errors import RagtrackError
from ragtrack.files import read_text
from ragtrack.records import RunSummary
from ragtrack.secrets import ensure_clean
from ragtrack.spec import LoadedSpec
from ragtrack.tracking import descriptions
from ragtrack.tracking.answering import ModelSettings
from ragtrack.tracking.store import Store, Tag, local_lock, without_progress_bar


@dataclass(frozen=True)
class ModelRef:
    model_id: str
    version: str  # registry version number
    reused: bool


def ensure_version_model(store: Store, spec: LoadedSpec, corpus_path: str, root: str) -> ModelRef:
    """Log and register ``spec`` as a model unless a registry version with its hash exists.

    Evals starting together register it once: a new version is looked up again and registered
    under the registry's lock (processes on other machines) and the local store's (set-up).
    """
    with local_lock(store.tracking_uri):
        if found := _registered(store, spec):
            return found
        with store.registry_lock("registration"):
            return _registered(store, spec) or _register(store, spec, corpus_path, root)


def _registered(store: Store, spec: LoadedSpec) -> ModelRef | None:
    existing = store.model_versions(spec.name, spec.hash)
    if not existing:
        return None
    return ModelRef(model_id=existing[0].source.removeprefix("models:/"), version=str(existing[0].version), reused=True)


def _register(store: Store, spec: LoadedSpec, corpus_path: str, root: str) -> ModelRef:
    tags = {
        Tag.VERSION: spec.name,
        Tag.AGENT_KIND: spec.kind,
        Tag.SPEC_HASH: spec.hash,
        Tag.DESCRIPTION: Tag.headline(spec.description) or Tag.NONE,  # a row of the registry's tag table
    }
    files = {
        "spec.json": spec.to_json(),
        f"{spec.name}.toml": read_text(spec.path),
    }
    for name, text in files.items():
        ensure_clean(text, f"{spec.name}'s {name}")
    with tempfile.TemporaryDirectory() as tmp, without_progress_bar():  # log_model copies its artifacts
        for name, text in files.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        mlflow.set_experiment(experiment_id=store.experiment_id)
        info = mlflow.pyfunc.log_model(
            name=spec.name,
            python_model=str(Path(__file__).with_name("agent_model.py")),  # models from code: no pickle
            artifacts={"spec": str(Path(tmp) / "spec.json"), "spec_toml": str(Path(tmp) / f"{spec.name}.toml")},
            # Every key a loader may override (see answering.ModelSettings): the Spark engine asks for records.
            model_config={"corpus": corpus_path, "root": root, "use_cache": True, "output": "answer"},
            params=spec.params(),
            tags=tags,
            pip_requirements=["ragtrack"],
        )
    version = store.register_model(info.model_id, tags)
    return ModelRef(model_id=info.model_id, version=version, reused=False)


def spec_change(store: Store, spec: LoadedSpec, model: ModelRef) -> str | None:
    """For a spec just registered under a name that has model versions already: what differs from the
    name's previous one (the champion, when the champion has this name). An edited prompt, a shared
    prompt file, even the description makes a new model version; the user should hear it at eval time,
    not discover "v1 refused over v1" at promotion."""
    if model.reused:
        return None
    others = [mv for mv in store.model_versions(spec.name) if str(mv.version) != model.version]
    if not others:
        return None
    champion = store.champion()
    previous = next((mv for mv in others if champion and str(mv.version) == champion[0]), others[0])
    try:
        old = store.client.get_logged_model(previous.source.removeprefix("models:/")).params
    except MlflowException:  # a model version registered by hand, not from a logged model
        return None
    new = spec.params()
    changed = [k for k in sorted(set(old) | set(new)) if k != "spec_hash" and old.get(k) != new.get(k)]
    shown = ", ".join(f"{k} {old.get(k, '—')} → {new.get(k, '—')}" for k in changed[:5])
    more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    who = " (the champion)" if champion and str(previous.version) == champion[0] else ""
    return (
        f"{spec.name} is registered as model version {model.version}: its spec differs from model version "
        f"{previous.version}{who}: {shown or 'its files'}{more}"
    )


def describe_logged_model(store: Store, model_id: str, current: RunSummary, params: dict[str, str]) -> None:
    """The LoggedModel's description: the agent version it is and links to every eval run that measured it.

    ``current`` is the eval run being recorded (not complete yet, so not found by a search).
    """
    runs = [current, *(r for r in store.eval_runs(model_id=model_id) if r.run_id != current.run_id)]
    text = descriptions.logged_model(
        current.version,
        params.get("spec.version.description", ""),
        current.model_version,
        runs,
        descriptions.Links(store.registered_model),
    )
    store.describe_logged_model(model_id, text)


def model_uri(store: Store, model: ModelRef) -> str:
    """The registry's URI of a version's model: what another process loads it by."""
    return f"models:/{store.registered_model}/{model.version}"


def answer_udf(spark, uri: str, settings: ModelSettings, env: dict[str, str]):
    """The registered pyfunc at ``uri`` as a Spark UDF (``mlflow.pyfunc.spark_udf``, this Python
    environment on the executors): question column → one JSON record per question (``settings`` with
    ``output="record"``). ``env``: variables the executors' agent needs (its keys), set there per task."""
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    level = pyfunc_log.level
    pyfunc_log.setLevel(logging.ERROR)  # its advice on env_manager="local" is for models trained elsewhere
    try:
        with without_progress_bar():  # it downloads the model's files
            udf = mlflow.pyfunc.spark_udf(
                spark, uri, result_type="string", env_manager="local", model_config=asdict(settings), extra_env=env
            )
    finally:
        pyfunc_log.setLevel(level)
    logged = udf.metadata.flavors.get(mlflow.pyfunc.FLAVOR_NAME, {}).get(mlflow.pyfunc.MODEL_CONFIG) or {}
    if "output" not in logged:  # MLflow ignores config keys a model was not logged with
        raise RagtrackError(
            f"{uri} was registered by an older ragtrack, whose pyfunc cannot hand the Spark engine whole "
            "records: evaluate it with --engine local, or delete that model version in the registry and "
            "evaluate again (it is registered anew)"
        )
    return udf
