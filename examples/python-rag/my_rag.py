"""A toy RAG function, standing in for your own: ragtrack's ``python`` agent kind calls ``answer``.

It ranks the paragraphs of golden/kb by the words they share with the question
and answers with the best paragraph's first sentence. What ragtrack needs back
is a dict with the answer and the ranked contexts; their text is mapped to the
corpus passages, so no IDs need to match.
"""

import re
from pathlib import Path

KB = Path(__file__).resolve().parents[2] / "golden" / "kb"
WORD = re.compile(r"[a-z0-9]+")


def _paragraphs() -> list[dict]:
    out = []
    for path in sorted(KB.rglob("*.md")):
        for n, text in enumerate(re.split(r"\n\s*\n", path.read_text(encoding="utf-8"))):
            if len(text.strip()) > 40 and not text.lstrip().startswith("#"):
                out.append({"id": f"{path.relative_to(KB)}:{n}", "text": text.strip()})
    return out


PARAGRAPHS = _paragraphs()


def answer(question: str) -> dict:
    words = set(WORD.findall(question.lower()))
    ranked = sorted(PARAGRAPHS, key=lambda p: -len(words & set(WORD.findall(p["text"].lower()))))[:3]
    first = re.split(r"(?<=[.!?])\s", ranked[0]["text"])[0] if ranked else ""
    return {"answer": first, "contexts": ranked}
