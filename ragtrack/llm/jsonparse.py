"""Reading JSON out of model replies, which are untrusted text.

Models wrap JSON in code fences, put prose before or after it, use full-width
punctuation (``｛"score"：4，…｝``) or stop mid-object. Reasoning models served
without a reasoning parser (Qwen3, DeepSeek-R1 on vLLM) think aloud inside
``<think>…</think>`` first, drafts included: only what follows counts.
:func:`extract_json` finds the first complete JSON value it can; callers decide
what to do when there is none (usually one repair round, then a recorded failure).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragtrack.llm.base import ParseError

_FULLWIDTH = str.maketrans(
    {"｛": "{", "｝": "}", "［": "[", "］": "]", "：": ":", "，": ",", "“": '"', "”": '"', "＂": '"'}
)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_REASONING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def without_reasoning(text: str) -> str:
    """``text`` without its ``<think>…</think>`` blocks; raises :class:`ParseError` when the reply
    stopped inside one (its drafts are not the answer)."""
    text = _REASONING.sub("", text or "")
    if "<think>" in text.lower():
        raise ParseError(
            "the reply stopped inside its <think> reasoning, before any answer (raise max_tokens — "
            "judge_max_tokens for judges — or serve the model with a reasoning parser)"
        )
    return text


def _balanced(text: str, start: int) -> str | None:
    """The bracketed value starting at ``text[start]``, honouring strings and escapes."""
    opener = text[start]
    closer = "}" if opener == "{" else "]"
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1] if ch == closer else None
    return None


MAX_REPLY_CHARS = 200_000  # longer replies are runaways: read their head only
MAX_TRIES = 20  # opening brackets tried as the start of a JSON value, per variant


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested beyond Python's stack
        return False, None


def _first_value(text: str) -> tuple[int, Any] | None:
    """(position, value) of the first bracketed JSON value in ``text`` that parses."""
    for i in [i for i, ch in enumerate(text) if ch in "{["][:MAX_TRIES]:
        block = _balanced(text, i)
        if block is not None:
            ok, value = _loads(block)
            if ok:
                return i, value
    return None


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``; raises :class:`ParseError` when there is none."""
    text = without_reasoning((text or "")[:MAX_REPLY_CHARS])
    if not text.strip():
        raise ParseError("empty reply")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        variants = (candidate, candidate.translate(_FULLWIDTH))
        for variant in variants:
            ok, value = _loads(variant.strip())
            if ok:
                return value
        # The earliest complete value wins: in ``｛"a"：[]｝`` that is the translated object, not its inner list.
        found = [hit for variant in variants if (hit := _first_value(variant)) is not None]
        if found:
            return min(found, key=lambda hit: hit[0])[1]
    if "{" in text and "}" not in text[text.index("{") :]:
        raise ParseError("truncated JSON (no closing brace)")
    raise ParseError("no JSON object found")


def string_list(text: str, key: str, limit: int) -> tuple[str, ...]:
    """``{"<key>": ["a", "b"]}`` (or a bare list) → up to ``limit`` distinct non-empty strings."""
    data = extract_json(text)
    values = data.get(key) if isinstance(data, dict) else data
    if not isinstance(values, list):
        raise ParseError(f"expected {{'{key}': [...]}}")
    out = tuple(dict.fromkeys(str(v).strip() for v in values if str(v).strip()))
    if not out:
        raise ParseError(f"no {key}")
    return out[:limit]
