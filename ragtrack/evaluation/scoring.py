"""One scoring path: (golden item, agent output, judges) → item record.

``ragtrack eval``, the ``mlflow.model_evaluator`` plugin and judge
calibration all score through here, so a metric means the same thing
wherever it is computed.
"""

from __future__ import annotations

from ragtrack.agent import AgentOutput
from ragtrack.evaluation.judges import JudgeInput, JudgePanel
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.golden import GoldenItem
from ragtrack.records import ContextRecord, ItemRecord, passage_groups


def score_item(item: GoldenItem, output: AgentOutput, panel: JudgePanel, k: int, latency_s: float = 0.0) -> ItemRecord:
    """Retrieval metrics from the output's contexts, then every judge's verdict on its answer.

    Recall and precision count the passages the contexts cover; MRR, hit rate, nDCG and
    all-hops rank the contexts themselves (the units the agent returned), so a large unit
    does not push the GT passage it holds down the ranking. ``k`` is the cut-off of the
    rank metrics in units (the version's top_k). An output that did not report its
    retrieval gets no retrieval metrics (``retrieval`` stays empty). Raises
    :class:`~ragtrack.llm.CircuitOpenError` only when the judge endpoint keeps failing.
    """
    contexts = [ContextRecord(c.unit_id, c.text, list(c.passage_ids), c.score, c.mapping) for c in output.contexts]
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
            retrieval_scores(passage_groups(output.contexts), item.gt_context_ids, k, item.gt_groups)
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
    )
