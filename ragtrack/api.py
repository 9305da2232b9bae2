"""The Python API: what the CLI calls, and what users can import.

from ragtrack.api import evaluate
report = evaluate("v5")
print(report.metrics["correctness"], report.run_id)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.config import ProjectConfig, load_config
from ragtrack.corpus import Corpus, load_corpus
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.diagnosis import Finding, diagnose, render
from ragtrack.evaluation.judges import JUDGES, judge_identity, judge_steps
from ragtrack.evaluation.runner import Checkpoint, ItemRecord, run_items
from ragtrack.golden import GoldenSet, load_golden
from ragtrack.llm import make_llm
from ragtrack.pipeline.agent import Agent
from ragtrack.spec import load_spec
from ragtrack.tracking import runs
from ragtrack.tracking.models import ensure_version_model
from ragtrack.tracking.store import open_store


@dataclass
class EvalReport:
    version: str
    run_id: str
    tracking_uri: str
    model_version: str
    metrics: dict[str, float]
    records: list[ItemRecord]
    accounting: dict[str, dict[str, dict[str, float]]]  # "agent"/"judge" → step → figures
    findings: list[Finding]
    params: dict[str, str]
    resumed: int = 0
    stopped_early: str | None = None
    index_from_cache: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.stopped_early is None


@dataclass
class Progress:
    """Callbacks the CLI uses to draw its progress bar (all optional)."""

    on_stage: Callable[[str], None] = lambda stage: None
    on_start: Callable[[int, int], None] = lambda total, resumed: None
    on_item: Callable[[ItemRecord], None] = lambda record: None


def load_inputs(config: ProjectConfig, corpus_path: str | None, golden_path: str | None) -> tuple[Corpus, GoldenSet]:
    corpus = load_corpus(corpus_path or config.path(config.project.corpus))
    golden = load_golden(golden_path or config.path(config.project.golden), corpus)
    return corpus, golden


def evaluate(
    version: str,
    *,
    root: str | Path = ".",
    golden_path: str | None = None,
    corpus_path: str | None = None,
    limit: int | None = None,
    llm: str | None = None,
    judge: str | None = None,
    judge_language: str | None = None,
    tracking_uri: str | None = None,
    use_cache: bool = True,
    fresh: bool = False,
    progress: Progress | None = None,
) -> EvalReport:
    """Answer every golden item with ``version``, score it and log an MLflow run.

    An interrupted eval resumes from its checkpoint when started again with the
    same inputs (``fresh=True`` starts over).
    """
    progress = progress or Progress()
    config = load_config(root)
    spec = load_spec(version, config.path(config.project.pipelines)).with_llm(llm)
    progress.on_stage("loading corpus and golden set")
    corpus, golden = load_inputs(config, corpus_path, golden_path)
    golden = golden.limit(limit)
    min_overlap = config.eval.min_overlap

    judge_name = judge or config.eval.judge
    language = judge_language or golden.language
    steps = judge_steps(language)
    judge_llm = make_llm(judge_name, config, use_cache=use_cache)
    agent_llm = make_llm(spec.spec.llm.model, config, use_cache=use_cache)
    judge_id = judge_identity(judge_llm.identity, steps)

    progress.on_stage(f"building {spec.name} (index, models)")
    agent = Agent(spec, corpus, agent_llm, cache_dir=config.cache_dir, min_overlap=min_overlap)

    store = open_store(config, tracking_uri)
    model = ensure_version_model(store, spec, str(corpus.source), str(Path(root).resolve()))

    key = hashlib.sha256(
        "|".join([spec.hash, golden.digest, judge_id, str(min_overlap), language]).encode()
    ).hexdigest()[:16]
    checkpoint = Checkpoint(config.cache_dir.parent / "checkpoints" / f"{spec.name}-{key}.jsonl")
    if fresh:
        checkpoint.remove()
    header, done = checkpoint.load()

    params = {
        "version": spec.name,
        "spec_hash": spec.hash,
        "model_version": model.version,
        "golden_path": golden.source,
        "golden_digest": golden.digest,
        "golden_items": str(len(golden)),
        "corpus_digest": corpus.digest,
        "corpus_passages": str(len(corpus)),
        "judge": "heuristic" if judge_llm.is_offline else judge_llm.identity,
        "judge_identity": judge_id,
        "judge_language": language,
        "mapping_min_overlap": str(min_overlap),
        **agent.describe(),
        **{f"spec.{k}": v for k, v in spec.params().items() if k != "spec_hash"},
    }
    tags = {
        runs.KIND_TAG: "eval",
        "ragtrack.version": spec.name,
        "ragtrack.spec_hash": spec.hash,
        "ragtrack.golden_digest": golden.digest,
        "ragtrack.judge_identity": judge_id,
        "ragtrack.substituted": str(agent.substituted).lower(),
        "ragtrack.model_version": model.version,
        "ragtrack.model_id": model.model_id,
    }
    run_id = runs.start_run(store, f"eval {spec.name}", params, tags, run_id=header.get("run_id"))
    checkpoint.start({"run_id": run_id, "version": spec.name})

    progress.on_start(len(golden), len([i for i in golden.items if i.id in done]))
    try:
        outcome = run_items(golden, agent, judge_llm, steps, checkpoint=checkpoint, on_item=progress.on_item)
    except BaseException:
        runs.finish_run(store, run_id, complete=False)
        raise

    progress.on_stage("logging to MLflow")
    metrics = aggregate(outcome.records, JUDGES)
    accounting = {
        "agent": agent_llm.accounting.summary(agent_llm.model_name),
        "judge": judge_llm.accounting.summary(judge_llm.model_name),
    }
    for who, steps_summary in accounting.items():
        for step, figures in steps_summary.items():
            for name, value in figures.items():
                metrics[f"llm/{who}/{step}/{name}"] = value
    metrics["llm/peak_in_flight"] = max(agent_llm.limiter.peak_in_flight, judge_llm.limiter.peak_in_flight)

    findings = diagnose(metrics, outcome.records)
    runs.log_metrics(store, run_id, metrics, model.model_id)
    runs.log_items(store, run_id, outcome.records)
    runs.log_text(store, run_id, "diagnosis.md", render(findings))
    runs.log_json(store, run_id, "accounting.json", accounting)
    runs.log_genai_records(store, run_id, model.model_id, outcome.records)
    complete = outcome.stopped_early is None and len(outcome.records) == len(golden)
    runs.finish_run(store, run_id, complete)
    if complete:
        checkpoint.remove()
    return EvalReport(
        version=spec.name,
        run_id=run_id,
        tracking_uri=store.tracking_uri,
        model_version=model.version,
        metrics=metrics,
        records=outcome.records,
        accounting=accounting,
        findings=findings,
        params=params,
        resumed=outcome.resumed,
        stopped_early=outcome.stopped_early,
        index_from_cache=agent.index_stats.from_cache,
    )
