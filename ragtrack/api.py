"""The Python API: what the CLI calls, and what users can import.

from ragtrack.api import evaluate
report = evaluate("v5")
print(report.metrics["correctness"], report.run_id)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ragtrack.config import ProjectConfig, load_config
from ragtrack.corpus import Corpus, load_corpus
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.calibration import Agreement, CalibrationCase, load_cases, summarize
from ragtrack.evaluation.compare import ItemChange, MetricRow, compare_records
from ragtrack.evaluation.diagnosis import Finding, diagnose, render
from ragtrack.evaluation.judges import JUDGES, judge_identity, judge_steps, prompt_hash
from ragtrack.evaluation.runner import Checkpoint, ItemRecord, run_items
from ragtrack.golden import GoldenSet, load_golden
from ragtrack.llm import make_llm
from ragtrack.pipeline.agent import Agent
from ragtrack.spec import load_spec
from ragtrack.tracking import runs
from ragtrack.tracking.compare import (
    EvalRun,
    comparability_problems,
    find_eval_runs,
    latest_eval_run,
    load_records,
    log_comparison,
)
from ragtrack.tracking.models import ensure_version_model
from ragtrack.tracking.promotion import Decision, Rule, current_champion, decide
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
    spec = load_spec(version, config.path(config.project.pipelines), config.root).with_llm(llm)
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
    tags = runs.eval_tags(
        version=spec.name,
        spec_hash=spec.hash,
        golden_digest=golden.digest,
        judge_identity=judge_id,
        substituted=agent.substituted,
        model_version=model.version,
        model_id=model.model_id,
    )
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


# ---------------------------------------------------------------- compare / promote / versions


@dataclass
class ComparisonReport:
    a: EvalRun
    b: EvalRun
    rows: list[MetricRow]
    changes: list[ItemChange]
    run_id: str
    warnings: list[str]


def compare(
    version_a: str,
    version_b: str,
    *,
    root: str | Path = ".",
    golden_path: str | None = None,
    tracking_uri: str | None = None,
    allow_incomparable: bool = False,
    log: bool = True,
) -> ComparisonReport:
    """The latest comparable eval runs of two versions, side by side with paired statistics.

    B's latest complete run picks the golden digest and judge (or ``golden_path``
    does); A's latest run with the same ones is its partner.
    """
    config = load_config(root)
    store = open_store(config, tracking_uri)
    digest = None
    if golden_path:
        _, golden = load_inputs(config, None, golden_path)
        digest = golden.digest
    b = latest_eval_run(store, version_b, digest)
    try:
        a = latest_eval_run(store, version_a, b.golden_digest, b.judge_identity)
    except RagtrackError:
        if not allow_incomparable:
            raise RagtrackError(
                f"{version_a} has no eval on the golden set and judge of {version_b}'s latest run "
                f"(digest {b.golden_digest}, judge {b.judge_identity}); run: ragtrack eval --version {version_a} "
                f"with the same --golden and --judge"
            ) from None
        a = latest_eval_run(store, version_a)
    warnings = comparability_problems(a, b)
    if a.substituted or b.substituted:
        warnings.append("substituted models in " + ", ".join(r.version for r in (a, b) if r.substituted))
    rows, changes = compare_records(load_records(store, a.run_id), load_records(store, b.run_id))
    if any(r.partial for r in rows if r.scope == "all"):
        warnings.append("some judge means cover fewer than all items (judge errors): see n")
    run_id = log_comparison(store, a, b, rows, changes, render_comparison(a, b, rows, changes)) if log else ""
    return ComparisonReport(a, b, rows, changes, run_id, warnings)


def render_comparison(a: EvalRun, b: EvalRun, rows: list[MetricRow], changes: list[ItemChange]) -> str:
    """Plain-text table (logged as an artifact; the CLI draws its own)."""
    lines = [f"{a.version} ({a.run_id}) vs {b.version} ({b.run_id})", ""]
    lines.append(f"{'metric':<20}{'scope':<8}{a.version:>8}{b.version:>8}{'delta':>9}  95% CI            p      n")
    for r in rows:
        d = r.diff
        lines.append(
            f"{r.metric:<20}{r.scope.removeprefix('type_'):<8}{d.mean_a:>8.3f}{d.mean_b:>8.3f}{d.delta:>+9.3f}"
            f"  [{d.ci_low:+.3f}, {d.ci_high:+.3f}]  {d.p_value:.3f}  {d.n}/{r.items_total}"
        )
    lines += ["", "items that moved (correctness):"]
    lines += [f"  {c.id} ({c.type}) {c.a:g} → {c.b:g}  {c.question}" for c in changes if c.metric == "correctness"]
    return "\n".join(lines)


def promote(
    version: str,
    *,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    margin: float = 0.0,
    tolerance: float = 0.0,
    require_significance: bool = False,
    allow_substitutes: bool = False,
    allow_partial: bool = False,
    dry_run: bool = False,
) -> Decision:
    """Apply the promotion rule to ``version``'s latest eval; moves the ``champion`` alias on success."""
    config = load_config(root)
    store = open_store(config, tracking_uri)
    rule = Rule(margin, tolerance, require_significance, allow_substitutes, allow_partial, dict(config.gates))
    return decide(store, version, rule, dry_run=dry_run, lock_dir=config.cache_dir)


@dataclass(frozen=True)
class VersionRow:
    version: str
    model_version: str
    spec_hash: str
    champion: bool
    last_evals: list[EvalRun]  # newest per golden digest


def versions(*, root: str | Path = ".", tracking_uri: str | None = None) -> list[VersionRow]:
    """Every registered version (newest model version each), its last eval per golden digest."""
    config = load_config(root)
    store = open_store(config, tracking_uri)
    champ = current_champion(store)
    try:
        mvs = store.client.search_model_versions(f"name='{store.registered_model}'")
    except Exception:
        mvs = []
    newest: dict[str, object] = {}
    for mv in mvs:
        name = mv.tags.get("ragtrack.version", "?")
        if name not in newest or int(mv.version) > int(newest[name].version):
            newest[name] = mv
    evals = find_eval_runs(store)
    rows = []
    for name in sorted(newest):
        mv = newest[name]
        per_digest: dict[str, EvalRun] = {}
        for run in evals:
            if run.version == name and run.golden_digest not in per_digest:
                per_digest[run.golden_digest] = run
        rows.append(
            VersionRow(
                name,
                str(mv.version),
                mv.tags.get("ragtrack.spec_hash", ""),
                bool(champ and champ[0] == str(mv.version)),
                list(per_digest.values()),
            )
        )
    return rows


# ---------------------------------------------------------------- judge calibration


@dataclass
class CalibrationReport:
    judge: str
    judge_identity: str
    agreements: dict[str, list[Agreement]]  # "all" / "en" / "zh" → per judge
    predictions: dict[str, list[int | None]]
    run_id: str


def calibrate(
    judge: str = "offline",
    *,
    root: str | Path = ".",
    cases_path: str | None = None,
    tracking_uri: str | None = None,
    use_cache: bool = True,
    limit: int | None = None,
    on_start: Callable[[int], None] = lambda total: None,
    on_case: Callable[[], None] = lambda: None,
) -> CalibrationReport:
    """Run ``judge`` over the calibration set and measure its agreement with the labels.

    Each case is judged with the prompts of its own language; results are logged
    as a run in ``<experiment>-judges``.
    """
    config = load_config(root)
    cases = load_cases(cases_path or config.path("golden/calibration/calibration.jsonl"))[:limit]
    llm = make_llm(judge, config, use_cache=use_cache)
    steps = {lang: judge_steps(lang) for lang in ("en", "zh")}
    predictions: dict[str, list[int | None]] = {j: [] for j in JUDGES}
    on_start(len(cases))

    def judge_case(case: CalibrationCase) -> dict[str, int | None]:
        scores: dict[str, int | None] = {}
        for name, step in steps[case.lang].items():
            result = llm.run(step, case.judge_input()) if name in case.labels else None
            scores[name] = result.value.score if result is not None and result.ok else None
        return scores

    with ThreadPoolExecutor(max_workers=llm.workers) as pool:
        for scores in pool.map(judge_case, cases):  # in case order
            for name in JUDGES:
                predictions[name].append(scores.get(name))
            on_case()
    by_scope = {"all": summarize(cases, predictions)}
    for lang in ("en", "zh"):
        idx = [i for i, c in enumerate(cases) if c.lang == lang]
        if idx:
            by_scope[lang] = summarize(
                [cases[i] for i in idx], {j: [p[i] for i in idx] for j, p in predictions.items()}
            )
    identity = judge_identity(llm.identity, steps["en"]) + "+zh=" + prompt_hash(steps["zh"])

    store = open_store(config, tracking_uri)
    run_id = runs.start_run(
        store,
        f"calibrate {judge}",
        {
            "judge": "heuristic" if llm.is_offline else llm.identity,
            "judge_identity": identity,
            "cases": str(len(cases)),
        },
        {runs.KIND_TAG: "calibration", "ragtrack.judge_identity": identity},
        experiment_id=store.side_experiment("judges"),
    )
    metrics: dict[str, float] = {}
    for scope, agreements in by_scope.items():
        for a in agreements:
            metrics.update(a.as_metrics("" if scope == "all" else f"/{scope}"))
    runs.log_metrics(store, run_id, metrics)
    runs.log_json(
        store,
        run_id,
        "calibration.json",
        {
            "cases": [c.id for c in cases],
            "predictions": predictions,
            "labels": {j: [c.labels.get(j) for c in cases] for j in JUDGES},
        },
    )
    runs.finish_run(store, run_id, complete=True)
    return CalibrationReport(judge, identity, by_scope, predictions, run_id)


# ---------------------------------------------------------------- golden set maintenance


def retirement_candidates(
    version_names: list[str], *, root: str | Path = ".", golden_path: str | None = None, tracking_uri: str | None = None
) -> list[str]:
    """Items with full marks (correctness 5, context recall 1) in the latest eval of every listed version.

    The golden set is an error notebook: items every recent version gets right
    only dilute the means; they belong in a regression set.
    """
    config = load_config(root)
    _, golden = load_inputs(config, None, golden_path)
    store = open_store(config, tracking_uri)
    perfect: set[str] | None = None
    for name in version_names:
        records = load_records(store, latest_eval_run(store, name, golden.digest).run_id)
        full = {
            r.id
            for r in records
            if r.retrieval["context_recall"] == 1.0
            and r.judges.get("correctness")
            and r.judges["correctness"].score == 5
        }
        perfect = full if perfect is None else perfect & full
    return [i.id for i in golden.items if i.id in (perfect or set())]


def retire(item_ids: list[str], *, root: str | Path = ".", golden_path: str | None = None) -> Path:
    """Move items from the golden set to ``regression.jsonl`` beside it (both rewritten atomically)."""
    config = load_config(root)
    path = Path(golden_path or config.path(config.project.golden))
    regression = path.with_name("regression.jsonl")
    keep, move = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            (move if json.loads(line).get("id") in set(item_ids) else keep).append(line)
    previous = regression.read_text(encoding="utf-8").splitlines() if regression.is_file() else []
    for target, lines in ((regression, previous + move), (path, keep)):
        tmp = target.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(target)
    return regression
