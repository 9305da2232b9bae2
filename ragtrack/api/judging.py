"""Calibrating a judge: how far it agrees with hand-assigned labels."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ragtrack.config import load_config
from ragtrack.evaluation.calibration import Agreement, CalibrationCase, load_cases, summarize
from ragtrack.evaluation.judges import JUDGES, JudgePanel, prompt_hash
from ragtrack.llm import make_llm
from ragtrack.tracking.store import Tag, open_store


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
