"""Calibrating a judge (how far it agrees with hand-assigned labels) and aligning it to them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ragtrack.config import load_config
from ragtrack.errors import RagtrackError
from ragtrack.evaluation import alignment
from ragtrack.evaluation.calibration import Agreement, CalibrationCase, agreement, load_cases, summarize
from ragtrack.evaluation.judges import JUDGES, LANGUAGES, JudgePanel, prompt_hash
from ragtrack.llm import make_llm
from ragtrack.tracking.store import Tag, open_store

#: The project's hand-labelled judge cases (``judge calibrate`` and ``judge align`` read them).
CALIBRATION_CASES = "golden/calibration/calibration.jsonl"


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
    cases = load_cases(cases_path or config.path(CALIBRATION_CASES))[:limit]
    store = open_store(config, tracking_uri)
    llm = make_llm(judge, config, use_cache=use_cache)
    panels = {lang: JudgePanel.create(llm, lang, config.eval.judge_max_tokens) for lang in ("en", "zh")}
    predictions: dict[str, list[int | None]] = {j: [] for j in JUDGES}
    on_start(len(cases))

    def judge_case(case: CalibrationCase) -> dict[str, int | None]:
        verdicts, _ = panels[case.lang].judge(case.judge_input(), only=tuple(case.labels))
        return {name: v.score for name, v in verdicts.items()}

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
    identity = panels["en"].identity + "+zh=" + prompt_hash(panels["zh"].steps)

    run_id = store.start_run(
        f"calibrate {judge}",
        {"judge": panels["en"].label, "judge_identity": identity, "cases": str(len(cases))},
        {Tag.KIND: "calibration", Tag.JUDGE_IDENTITY: identity},
        experiment_id=store.side_experiment("judges"),
    )
    metrics: dict[str, float] = {}
    for scope, agreements in by_scope.items():
        for a in agreements:
            metrics.update(a.as_metrics("" if scope == "all" else f"/{scope}"))
    store.log_metrics(run_id, metrics)
    store.log_json(
        run_id,
        "calibration.json",
        {
            "cases": [c.id for c in cases],
            "predictions": predictions,
            "labels": {j: [c.labels.get(j) for c in cases] for j in JUDGES},
        },
    )
    store.finish_run(run_id)
    return CalibrationReport(judge, identity, by_scope, predictions, run_id)


@dataclass(frozen=True)
class JudgeAlignment:
    """One judge's alignment: its split, the examples shown, held-out agreement before and after."""

    judge: str
    pool: int  # cases in the example pool
    held_out: list[str]  # ids of the cases agreement is measured on
    examples: dict[str, list[str]]  # language → example case ids (a language the pool could not cover: absent)
    before: Agreement
    after: Agreement
    kept: bool  # the examples are part of the saved aligned judge

    @property
    def status(self) -> str:
        if not self.examples:
            return f"fewer than {alignment.MIN_EXAMPLES} graded examples in the pool"
        return "aligned" if self.kept else "not better: plain prompt kept"


@dataclass
class AlignmentReport:
    judge: str
    judge_identity: str  # the plain judge's
    judges: list[JudgeAlignment]
    saved: alignment.AlignedJudge | None  # None: held-out agreement improved for no judge, nothing saved
    run_id: str

    @property
    def aligned_identity(self) -> str:
        return self.saved.digest if self.saved else ""


def align(
    judge: str,
    *,
    root: str | Path = ".",
    cases_path: str | None = None,
    seed: int = 0,
    examples: int = alignment.MAX_EXAMPLES,
    tracking_uri: str | None = None,
    use_cache: bool = True,
    on_start: Callable[[int], None] = lambda total: None,
    on_case: Callable[[], None] = lambda: None,
) -> AlignmentReport:
    """Show an LLM judge graded examples from the human labels; keep them only where they help.

    Per judge, the labelled cases are split (seeded, stratified by language and label) into
    a pool and a held-out split; ``examples`` (3–5) pool cases spread over the score range
    are added to its prompt; the plain and the aligned prompt both judge the held-out split.
    The judges whose held-out agreement improved (:func:`~ragtrack.evaluation.alignment.improved`)
    are saved as ``judges/aligned/<judge>.json``, a new judge identity; when none did,
    nothing is saved. The measurement is logged as a run in ``<experiment>-judges``.
    """
    if not alignment.MIN_EXAMPLES <= examples <= alignment.MAX_EXAMPLES:
        raise RagtrackError(
            f"examples must be {alignment.MIN_EXAMPLES} to {alignment.MAX_EXAMPLES} per judge (got {examples})"
        )
    config = load_config(root)
    source = cases_path or config.path(CALIBRATION_CASES)
    cases = _cases_or_labels(source)
    llm = make_llm(judge, config, use_cache=use_cache)
    if llm.is_offline:
        raise RagtrackError(
            "the offline judges are heuristics and read no prompt, so examples cannot align them: "
            "name an LLM judge (--judge openai:<model>, local:<path> or a profile)"
        )
    splits = {name: alignment.split_cases(cases, name, seed) for name in JUDGES.names()}
    picked = {
        name: {
            lang: chosen for lang in LANGUAGES if (chosen := alignment.pick_examples(split.pool, name, lang, examples))
        }
        for name, split in splits.items()
    }
    prompts = {
        name: {lang: alignment.render_examples(chosen, name, lang) for lang, chosen in by_lang.items()}
        for name, by_lang in picked.items()
        if by_lang
    }
    max_tokens = config.eval.judge_max_tokens
    plain = {lang: JudgePanel.create(llm, lang, max_tokens) for lang in LANGUAGES}
    shown = {
        lang: JudgePanel.create(llm, lang, max_tokens, examples={n: p[lang] for n, p in prompts.items() if lang in p})
        for lang in LANGUAGES
    }
    # Every held-out case of a judge with examples, judged by the plain and the aligned prompt.
    tasks = [(name, case, panels) for name in prompts for case in splits[name].held_out for panels in (plain, shown)]
    on_start(len(tasks))

    def verdict(task: tuple[str, CalibrationCase, dict[str, JudgePanel]]) -> int | None:
        name, case, panels = task
        verdicts, _ = panels[case.lang].judge(case.judge_input(), only=(name,))
        return verdicts[name].score

    scores: dict[tuple[str, str, bool], int | None] = {}
    with ThreadPoolExecutor(max_workers=llm.workers) as pool:
        for (name, case, panels), score in zip(tasks, pool.map(verdict, tasks), strict=True):
            scores[(name, case.id, panels is shown)] = None if score is None else int(score)
            on_case()

    results = []
    for name, split in splits.items():
        labels = [c.labels[name] for c in split.held_out]
        before = agreement(name, labels, [scores.get((name, c.id, False)) for c in split.held_out])
        after = agreement(name, labels, [scores.get((name, c.id, True)) for c in split.held_out])
        ids = {lang: [c.id for c in chosen] for lang, chosen in picked[name].items()}
        kept = bool(ids) and alignment.improved(before, after)
        results.append(JudgeAlignment(name, len(split.pool), [c.id for c in split.held_out], ids, before, after, kept))
    kept_prompts = {r.judge: prompts[r.judge] for r in results if r.kept}
    digest = alignment.digest_of(kept_prompts) if kept_prompts else ""
    identity = plain["en"].identity + "+zh=" + prompt_hash(plain["zh"].steps)

    store = open_store(config, tracking_uri)
    run_id = store.start_run(
        f"align {judge}",
        {
            "judge": plain["en"].label,
            "judge_identity": identity,
            "cases": str(len(cases)),
            "seed": str(seed),
            "examples": str(examples),
            "aligned": digest or "none",
        },
        {Tag.KIND: "alignment", Tag.JUDGE_IDENTITY: identity, Tag.JUDGE_ALIGNED: digest or "none"},
        experiment_id=store.side_experiment("judges"),
    )
    metrics: dict[str, float] = {}
    for r in results:
        if r.examples:
            metrics.update(r.before.as_metrics("/before"))
            metrics.update(r.after.as_metrics("/after"))
    store.log_metrics(run_id, metrics)
    saved = None
    if kept_prompts:
        path = alignment.aligned_path(config.root, judge)
        record = alignment.AlignedJudgeFile(
            format=alignment.FORMAT,
            judge=judge,
            llm=llm.identity,
            digest=digest,
            seed=seed,
            cases=str(source),
            examples={r.judge: r.examples for r in results if r.kept},
            prompts=kept_prompts,
            agreement={r.judge: {"before": _figures(r.before), "after": _figures(r.after)} for r in results if r.kept},
            held_out={r.judge: r.held_out for r in results if r.kept},
            run_id=run_id,
        )
        alignment.save_aligned(path, record)
        saved = alignment.AlignedJudge(path, digest, kept_prompts, record)
    store.log_json(
        run_id,
        "alignment.json",
        {
            r.judge: {
                "examples": r.examples,
                "held_out": r.held_out,
                "before": _figures(r.before),
                "after": _figures(r.after),
                "kept": r.kept,
            }
            for r in results
        },
    )
    store.finish_run(run_id)
    return AlignmentReport(judge, identity, results, saved, run_id)


def _figures(a: Agreement) -> dict[str, float | None]:
    return {"n": a.n, "errors": a.errors, "exact": a.exact, "within_one": a.within_one, "spearman": a.spearman}


def _cases_or_labels(path: str | Path) -> list[CalibrationCase]:
    """The calibration cases in ``path``, or, when its first line names a ``version``, a human-label file
    (``ragtrack labels pull`` writes one) read as cases, one per version's answer."""
    from ragtrack.evaluation.human_labels import as_calibration_cases, load_labels

    with contextlib.suppress(OSError, ValueError), Path(path).open(encoding="utf-8") as f:
        first = next((line for line in f if line.strip()), "{}")
        if isinstance(head := json.loads(first), dict) and "version" in head:
            return as_calibration_cases(load_labels(path))
    return load_cases(path)
