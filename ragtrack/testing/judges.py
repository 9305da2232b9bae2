"""A stand-in LLM judge with a known bias, behind the loopback OpenAI server
(:class:`~ragtrack.llm.fake_server.FakeOpenAIServer`), for judge alignment.

It knows the human label of every calibration case (found by the case's answer in the
request's user message) and answers the label shifted by ``bias`` points, clipped to
1–5 — unless the system prompt carries the graded examples ``ragtrack judge align``
adds (:data:`~ragtrack.evaluation.alignment.HEADING`), then shifted by ``aligned_bias``.
So ``labelled_judge(cases, bias=1)`` is a judge one point too generous that the
project's examples cure, deterministically; an answer it does not know (a golden
item's) gets ``unknown``.

    with FakeOpenAIServer(reply=labelled_judge(load_cases(path), bias=1)) as server: ...
"""

from __future__ import annotations

import json
from typing import Any

from ragtrack.evaluation.alignment import HEADING
from ragtrack.evaluation.calibration import CalibrationCase
from ragtrack.evaluation.judges import JUDGES, LANGUAGES, load_prompt
from ragtrack.llm.fake_server import Reply


def _opening(judge: str, language: str) -> str:
    """The first line of a judge prompt's system part: which judge a request is."""
    system = load_prompt(judge, language).partition("<<<user>>>")[0].replace("<<<system>>>", "").strip()
    return system.splitlines()[0]


def labelled_judge(cases: list[CalibrationCase], bias: int = 1, aligned_bias: int = 0, unknown: int = 4) -> Reply:
    """A reply function for the loopback server: each case's label + ``bias`` (+ ``aligned_bias`` when
    the request shows graded examples), clipped to 1–5."""
    openings = {_opening(j, lang): j for j in JUDGES.names() for lang in LANGUAGES}
    headings = tuple(HEADING.values())

    def reply(request: dict[str, Any]) -> str:
        messages = request["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = messages[-1]["content"]
        judge = next((j for opening, j in openings.items() if system.startswith(opening)), None)
        case = max((c for c in cases if c.answer in user), key=lambda c: len(c.answer), default=None)
        if judge is None or case is None or judge not in case.labels:
            return json.dumps({"score": unknown, "reason": "not a labelled case"})
        shift = aligned_bias if any(h in system for h in headings) else bias
        score = min(5, max(1, case.labels[judge] + shift))
        return json.dumps({"score": score, "reason": f"label {case.labels[judge]} shifted by {shift}"})

    return reply
