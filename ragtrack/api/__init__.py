"""The Python API: what the CLI calls, and what users can import.

    from ragtrack.api import evaluate, compare, promote
    report = evaluate("v5")
    print(report.metrics["correctness"], report.run_id)

One module per job: :mod:`~ragtrack.api.evaluation` (evaluate a version),
:mod:`~ragtrack.api.decisions` (compare, promote, and a run's
Markdown for CI), :mod:`~ragtrack.api.listing` (the registered versions),
:mod:`~ragtrack.api.judging` (calibrate a judge, align it to human labels), :mod:`~ragtrack.api.golden`
(golden set tools), :mod:`~ragtrack.api.corpus` (finding passages),
:mod:`~ragtrack.api.platforms` (import a Dify or RAGFlow knowledge base),
:mod:`~ragtrack.api.production` (pull an app's production conversations),
:mod:`~ragtrack.api.triage` (rank their bad cases),
:mod:`~ragtrack.api.monitoring` (score each day's traffic),
:mod:`~ragtrack.api.serving` (the champion behind MLflow's model server) and
:mod:`~ragtrack.api.project` (init, the MLflow UI, the cache). Names
are imported on first use, so ``import ragtrack.api`` loads neither MLflow nor
the retrieval stack.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "evaluation": [
        "EvalOptions",
        "EvalReport",
        "EvalSession",
        "Progress",
        "evaluate",
        "finish_eval",
        "load_inputs",
        "prepare_eval",
        "run_eval",
    ],
    "decisions": [
        "ComparisonReport",
        "Decision",
        "MetricRow",
        "RunSummary",
        "compare",
        "promote",
        "run_markdown",
    ],
    "listing": ["VersionRow", "champion_notes", "versions"],
    "judging": ["AlignmentReport", "CalibrationReport", "align", "calibrate"],
    "labels": ["LabelPullReport", "LabelQueueReport", "pull_labels", "queue_labels"],
    "golden": [
        "AnswerReport",
        "AuditReport",
        "GoldenCheck",
        "ProposeReport",
        "accept_candidates",
        "answer_golden",
        "audit_golden",
        "check_golden",
        "fingerprint_golden",
        "golden_stats",
        "import_benchmark",
        "propose",
        "retire",
        "retirement_candidates",
        "validate_golden",
    ],
    "corpus": ["PassageRow", "list_passages", "open_corpus", "search_passages", "show_passage"],
    "project": ["InitReport", "cache_entries", "init_project", "prune_cache", "ui_command"],
    "serving": ["ServePlan", "serve_command"],
    "platforms": ["import_corpus"],
    "production": ["PullReport", "pull_logs"],
    "monitoring": ["MonitorReport", "monitor"],
    "triage": ["FromLogsReport", "Judging", "TriageReport", "propose_from_logs", "triage_logs"],
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"ragtrack.api.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'ragtrack.api' has no attribute {name!r}")
