"""Human labels in MLflow's review queues: queue a version's item traces, pull people's scores back.

``queue_labels`` gives reviewers, in the MLflow UI, the traces of a stratified sample of a version's
latest eval (question, contexts with their passage IDs, the GT passages and answer are on each
trace) and one 1–5 question per judged metric with the judge's own rubric. ``pull_labels`` writes
their HUMAN scores into the project's label file, the one ``eval``, ``compare`` (prediction-powered
figures) and ``judge align`` read: the store holds the labels, the file is their export (and the way
to bring in labels made elsewhere: its lines the store does not have are kept).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ragtrack.config import load_config
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.human_labels import DEFAULT_PATH, VersionLabel, judged_metrics, load_labels
from ragtrack.evaluation.judges import JUDGES, reviewer_rubric
from ragtrack.evaluation.review_sample import DEFAULT_SIZE, stratified_sample
from ragtrack.records import ItemRecord
from ragtrack.text import language_of


@dataclass(frozen=True)
class LabelQueueReport:
    """The review queue ``labels queue`` made or topped up."""

    version: str
    run_id: str
    queue: str  # its name in the MLflow UI
    queue_id: str
    metrics: list[str]  # the judged metrics asked about (schemas ``human/<metric>``)
    language: str
    sampled: dict[str, int]  # question type → items sent to review
    items: int  # items the queue holds now (with any queued before)
    untraced: list[str] = field(default_factory=list)  # sampled items the run has no trace of
    ui: str | None = None


def queue_labels(
    version: str, *, root: str | Path = ".", tracking_uri: str | None = None, size: int = DEFAULT_SIZE
) -> LabelQueueReport:
    """A review queue over ``size`` item traces of ``version``'s latest eval (stratified by question
    type, :mod:`ragtrack.evaluation.review_sample`), asking a 1–5 score per judged metric."""
    from ragtrack.tracking.review import label_schemas_for, review_queue
    from ragtrack.tracking.store import open_store
    from ragtrack.tracking.traces import item_traces

    if size < 1:
        raise RagtrackError(f"--size must be at least 1, got {size}")
    config = load_config(root)
    store = open_store(config, tracking_uri, existing=True)
    run = store.latest_eval(version)
    records = store.records(run.run_id)
    metrics = judged_metrics(records)
    if not metrics:
        raise RagtrackError(
            f"{version}'s latest eval ({run.run_id[:8]}) has no judge verdicts: nothing for people to score "
            f"beside them; run: ragtrack eval --version {version} with a judge"
        )
    language = language_of("".join(r.question for r in records))
    schema_ids = label_schemas_for(store, {m: reviewer_rubric(m, language) for m in metrics})
    traces = item_traces(store, run.run_id)
    chosen = stratified_sample([(r.id, r.type) for r in records], size)
    untraced = [i for i in chosen if i not in traces]
    traced = [i for i in chosen if i in traces]
    if not traced:
        raise RagtrackError(f"{version}'s latest eval ({run.run_id[:8]}) has no item traces to review")
    name = f"ragtrack {version} {run.run_id[:8]}"
    # The newest trace of an item (several only after an interrupted write): the one the UI lists.
    trace_ids = [max(traces[i], key=lambda t: t.request_time).trace_id for i in traced]
    queue_id, held = review_queue(store, name, schema_ids, trace_ids)
    kinds = {r.id: r.type for r in records}
    sampled = dict(sorted(Counter(kinds[i] for i in traced).items()))
    return LabelQueueReport(
        version, run.run_id, name, queue_id, metrics, language, sampled, held, untraced, store.ui_address
    )


@dataclass(frozen=True)
class LabelPullReport:
    """What ``labels pull`` wrote: the label file, the scores per version, what it could not use."""

    path: str
    labelled: dict[str, int]  # version → answers with at least one score from the store
    scores: int  # metric scores taken from the store
    kept: int  # lines of the file the store does not have (imported labels), kept as they were
    skipped: list[str] = field(default_factory=list)  # one line each: which score, why


def pull_labels(*, root: str | Path = ".", tracking_uri: str | None = None, out: str | None = None) -> LabelPullReport:
    """Every HUMAN ``human/<metric>`` score on the review queues' traces, into the label file ``out``
    (default ``[project] human_labels``, else golden/labels/human-labels.jsonl): one line per version's
    answer to an item, with the run's question, contexts, GT answer and answer, who scored and when."""
    from ragtrack.tracking.review import human_scores
    from ragtrack.tracking.store import open_store

    config = load_config(root)
    path = Path(out) if out else config.path(config.project.human_labels or DEFAULT_PATH)
    store = open_store(config, tracking_uri, existing=True, writing=False)
    scores = human_scores(store)
    records: dict[str, dict[str, ItemRecord]] = {}
    grouped: dict[tuple[str, str], dict] = {}
    skipped = []
    for s in sorted(scores, key=lambda s: (s.version, s.item_id, s.metric)):
        where = f"{s.version} {s.item_id} human/{s.metric} (trace {s.trace_id})"
        if s.metric not in JUDGES.names():
            skipped.append(f"{where}: {s.metric} is not a judged metric: skipped")
            continue
        if isinstance(s.value, bool) or not isinstance(s.value, int | float) or s.value not in (1, 2, 3, 4, 5):
            skipped.append(f"{where}: {s.value!r} is not a score 1–5: skipped")
            continue
        if s.run_id not in records:
            records[s.run_id] = {r.id: r for r in store.records(s.run_id)}
        record = records[s.run_id].get(s.item_id)
        if record is None:
            skipped.append(f"{where}: its eval run {s.run_id[:8]} has no record of the item: skipped")
            continue
        line = grouped.setdefault((s.version, s.item_id), _line(s.version, record))
        line["labels"][s.metric] = int(s.value)
        # One reviewer and time per line: the latest score's (a second reviewer's is named in the note).
        if s.time_ms >= line["_time"]:
            if line["reviewer"] and line["reviewer"] != s.reviewer:
                line["note"] = f"also scored by {line['reviewer']}"
            line["reviewer"], line["_time"] = s.reviewer, s.time_ms
            line["labelled_at"] = datetime.fromtimestamp(s.time_ms / 1000, UTC).isoformat(timespec="seconds")
    if not grouped:  # nothing to write: the file (if any) stays as it is
        raise RagtrackError(
            f"no HUMAN scores (human/<metric>, 1–5) on the review queues' traces yet ({len(skipped)} skipped: "
            f"{'; '.join(skipped[:3]) or 'none'}); label in the MLflow UI first (ragtrack labels queue VERSION, "
            "ragtrack ui)"
        )
    kept = []
    if path.is_file():  # lines the store does not have (imported labels) are kept, in their order
        kept = [label for label in load_labels(path).labels if (label.version, label.id) not in grouped]
    lines = [label.model_dump(mode="json") for label in kept]
    for line in grouped.values():
        line.pop("_time")
        lines.append(VersionLabel.model_validate(line).model_dump(mode="json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    os.replace(part, path)  # a crash mid-write leaves the old file whole
    labelled = dict(sorted(Counter(v for v, _ in grouped).items()))
    return LabelPullReport(str(path), labelled, sum(len(x["labels"]) for x in grouped.values()), len(kept), skipped)


def _line(version: str, r: ItemRecord) -> dict:
    return {
        "id": r.id,
        "version": version,
        "lang": language_of(r.question),
        "question": r.question,
        "contexts": [c.text for c in r.contexts],
        "gt_answer": r.gt_answer,
        "answer": r.answer,
        "labels": {},
        "reviewer": "",
        "labelled_at": "",
        "_time": -1,
    }
