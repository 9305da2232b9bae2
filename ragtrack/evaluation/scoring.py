"""One scoring path: (golden item, agent output, judges) → item record.

``ragtrack eval``, the ``mlflow.model_evaluator`` plugin and judge
calibration all score through here, so a metric means the same thing
wherever it is computed.
"""

from __future__ import annotations

from ragtrack.agent import AgentOutput, RetrievedContext
from ragtrack.evaluation.judges import JudgeInput, JudgePanel
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.golden import GoldenItem
from ragtrack.records import ContextRecord, ItemRecord, StageRecord


def score_item(item: GoldenItem, output: AgentOutput, panel: JudgePanel, k: int, latency_s: float = 0.0) -> ItemRecord:
    """Retrieval metrics from the output's passage IDs, then every judge's verdict on its answer.

    ``k`` is the cut-off of the rank metrics (the version's top_k). An output that did not
    report its retrieval gets no retrieval metrics (``retrieval`` stays empty). Raises
    :class:`~ragtrack.llm.CircuitOpenError` only when the judge endpoint keeps failing.
    """
    contexts = [_context(c) for c in output.contexts]
    inp = JudgeInput(item.question, output.answer, item.gt_answer, tuple(c.text for c in output.contexts if c.text))
    verdicts, judge_usage = panel.judge(inp)
    return ItemRecord(
        id=item.id,
        type=item.type,
        question=item.question,
        gt_context_ids=list(item.gt_context_ids),
        gt_answer=item.gt_answer,
        answer=output.answer,
        contexts=contexts,
        retrieval=(
            retrieval_scores(output.passage_ids, item.gt_context_ids, k, item.gt_groups)
            if output.retrieval_reported
            else {}
        ),
        judges=verdicts,
        queries=list(output.queries),
        outline=list(output.outline),
        errors=list(output.errors),
        tags=list(item.tags),
        latency_s=round(latency_s, 3),
        gt_groups=[list(g) for g in item.gt_groups],
        usage={"agent": dict(output.usage), "judge": judge_usage},
        stages=[
            StageRecord(s.name, s.kind, s.start_ns, s.end_ns, s.inputs, s.outputs, [_context(c) for c in s.contexts])
            for s in output.stages
        ],
    )


def _context(c: RetrievedContext) -> ContextRecord:
    return ContextRecord(c.unit_id, c.text, list(c.passage_ids), c.score, c.mapping)
