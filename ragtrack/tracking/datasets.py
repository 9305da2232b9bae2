"""The files a run read, as its MLflow dataset inputs (the UI's Datasets column): the golden set of an
eval, the human-label file behind prediction-powered figures."""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter

import pandas as pd
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import DatasetInput, InputTag
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from ragtrack.evaluation.human_labels import PPIReport
from ragtrack.golden import GoldenSet, Staleness
from ragtrack.tracking.store import Store


def _file_source(path: str) -> DatasetSource:
    with warnings.catch_warnings():  # MLflow registers the local-file source twice and says so
        warnings.simplefilter("ignore")
        return resolve_dataset_source(path)


class GoldenDataset(MetaDataset):
    """A golden set as a metadata-only MLflow dataset, with a profile (item counts) beside name and digest."""

    def __init__(self, source: DatasetSource, name: str, digest: str, profile: dict):
        self._profile = profile
        super().__init__(source, name=name, digest=digest)

    @property
    def profile(self) -> dict:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile, ensure_ascii=False)}


def log_golden_dataset(store: Store, run_id: str, golden: GoldenSet, stale: list[Staleness]) -> None:
    """The golden set as the run's named MLflow dataset input (the UI's Datasets column).

    Name = the golden file's stem and the digest's first 8 characters (``golden@3c77a25d``: the runs
    table's Datasets column shows only the name, and runs on a --limit cut or an edited set must not
    look alike there), digest = the golden digest (the comparability key), source = the file,
    profile = item count, items per type, the corpus digest and the items scored with stale GT
    under ``--allow-stale``. Logging the same dataset again (a resumed run) adds nothing.
    """
    path = os.path.abspath(golden.source)
    source = _file_source(path)
    types = Counter(i.type for i in golden.items)
    profile = {
        "items": len(golden),
        "types": {t: types[t] for t in sorted(types)},
        "corpus_digest": golden.corpus_digest,
        "stale_items": [s.item_id for s in stale],
    }
    name = f"{os.path.splitext(os.path.basename(path))[0]}@{golden.digest[:8]}"
    dataset = GoldenDataset(source, name, golden.digest, profile)._to_mlflow_entity()
    store.log_dataset_input(run_id, DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "eval")]))


def log_human_labels(store: Store, run_id: str, ppi: PPIReport) -> None:
    """The human-label file behind a run's prediction-powered figures as its MLflow dataset input
    (context ``human_labels``): one row per label (version, item, the scores, the answer), the file as
    source, name ``<stem>@<digest>`` like the golden set's. Logging it again (a resumed run) adds nothing.
    Scores are floats: a judge some lines leave unlabelled is a missing value, not a broken int column."""
    from mlflow.data.pandas_dataset import from_pandas

    file = ppi.file
    rows = [
        {"version": c.version, "id": c.id, **{f"label.{j}": float(s) for j, s in c.labels.items()}, "answer": c.answer}
        for c in file.labels
    ]
    path = os.path.abspath(file.path)
    source = _file_source(path)
    name = f"{os.path.splitext(os.path.basename(path))[0]}@{file.digest[:8]}"
    dataset = from_pandas(pd.DataFrame(rows), source=source, name=name, digest=file.digest)._to_mlflow_entity()
    store.log_dataset_input(run_id, DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, "human_labels")]))
