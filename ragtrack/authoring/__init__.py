"""Building the golden set: the seeds' SOP as commands.

1. an LLM proposes candidate questions of each type from documents
   (:mod:`~ragtrack.authoring.propose`), written to a candidates file;
2. a person marks the GT passages (``ragtrack corpus search`` to find them) and
   accepts candidates into the golden set (:mod:`~ragtrack.authoring.candidates`);
3. an LLM fuses the GT passages into the GT answer (:mod:`~ragtrack.authoring.answer`);
4. an auditor checks each answer against its passages, and each GT set for
   sufficiency and minimality (:mod:`~ragtrack.authoring.audit`).

Each LLM task is a :class:`~ragtrack.llm.Step` run through the shared client
(cache, retries, concurrency, accounting), with prompts in
``prompts/<lang>/<task>.md`` and an offline implementation that says what it
is: a template proposer, extractive answers, a lexical audit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources

from ragtrack.agent import transcript
from ragtrack.corpus import Passage
from ragtrack.golden import Turn
from ragtrack.text import render

# The three LLM tasks, and the part the answer and audit prompts add for a follow-up.
PROMPTS = ("propose", "answer", "audit", "conversation")
LANGUAGES = ("en", "zh")
PASSAGE_CHARS = 1500  # a prompt shows at most this much of one passage
PROMPT_CHARS = 40_000  # the proposer's passages: beyond this, ask for fewer documents rather than cut silently
_LABEL = re.compile(r"(?<![A-Za-z0-9])P(\d+)(?![0-9])")


def load_prompt(task: str, language: str) -> str:
    if task not in PROMPTS or language not in LANGUAGES:
        raise ValueError(f"no {task!r} prompt in {language!r}")
    return resources.files("ragtrack.authoring").joinpath(f"prompts/{language}/{task}.md").read_text("utf-8")


def conversation(history: Sequence[Turn], language: str) -> str:
    """A follow-up's earlier turns as the answer and audit prompts show them, before the question
    (their ``{{history}}`` slot); "" for a lone question, whose prompt — and so its cached reply —
    stays what it was before items had history."""
    if not history:
        return ""
    return render(load_prompt("conversation", language), turns=transcript(history)).strip() + "\n\n"


def label(n: int) -> str:
    """The label a prompt gives its ``n``-th passage (from 1): short, so a model copies it exactly."""
    return f"P{n}"


def labelled_passages(passages: Sequence[Passage], limit: int = PASSAGE_CHARS) -> str:
    """Passages as a prompt shows them: ``[P1] (heading path) text``, long ones cut at ``limit``."""
    blocks = []
    for n, p in enumerate(passages, start=1):
        text = p.text.strip()
        if len(text) > limit:
            text = text[:limit] + " …"
        where = f"{p.doc_id} > {p.title}" if p.title else p.doc_id
        blocks.append(f"[{label(n)}] ({where})\n{text}")
    return "\n\n".join(blocks) or "(no passages)"


def resolve_labels(values: object, passages: Sequence[Passage]) -> tuple[list[str], list[str]]:
    """Labels a model cited (``P3``, ``[P3]``, ``3`` or the passage ID itself) → (passage IDs, unknown labels)."""
    if isinstance(values, str | int):
        values = [values]
    if not isinstance(values, list):
        return [], [repr(values)]
    by_label = {label(n).lower(): p.id for n, p in enumerate(passages, start=1)}
    ids = {p.id for p in passages}
    found, unknown = [], []
    for v in values:
        text = str(v).strip().strip("[]【】").strip()
        key = text.lower() if text.lower().startswith("p") else f"p{text}"
        pid = text if text in ids else by_label.get(key)
        if pid is None:
            unknown.append(str(v))
        elif pid not in found:
            found.append(pid)
    return found, unknown


def unlabel(text: str, passages: Sequence[Passage]) -> str:
    """A model's text with the prompt's labels (``P2``) replaced by the passage IDs a person can look up."""

    def swap(m: re.Match) -> str:
        n = int(m.group(1))
        return passages[n - 1].id if 1 <= n <= len(passages) else m.group(0)

    return _LABEL.sub(swap, text)
