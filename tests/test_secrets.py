"""Secrets never reach the tracking store: redaction of outgoing text, refusal of verbatim artifacts."""

from __future__ import annotations

import pytest

from ragtrack import secrets
from ragtrack.api import evaluate
from ragtrack.errors import RagtrackError

KEY = "sk-proj-leaktest-5b1d9e0c7a"


def test_redact_replaces_secret_values_and_key_shapes(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MY_DIFY_APP", "app-notnamedlikeakey42")
    secrets.declare("MY_DIFY_APP")
    text = f"bad key {KEY} and app-notnamedlikeakey42 and sk-abcdefghijkl; ok words: sampler-settings"
    assert secrets.redact(text) == "bad key *** and *** and ***; ok words: sampler-settings"


def test_a_prompt_holding_a_secret_is_never_logged(project, monkeypatch):
    """A prompt file inside the project that happens to contain a key: the eval stops before logging it."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    prompt = project / "pipelines" / "prompts" / "answer_plain.md"
    prompt.write_text(prompt.read_text() + f"\n(internal note: key {KEY})\n")
    with pytest.raises(RagtrackError, match=r"v1's .* contains the value of \$OPENAI_API_KEY"):
        evaluate("v1", root=project, limit=1)
    leaked = [p for p in project.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes() and p != prompt]
    assert not leaked, leaked


def test_urls_lose_their_credentials_before_they_are_shown_or_used_as_keys():
    from ragtrack.secrets import without_credentials

    assert without_credentials("postgresql+psycopg2://me:pw@db:5432/mlflow") == "postgresql+psycopg2://db:5432/mlflow"
    assert without_credentials("http://user:tok@127.0.0.1:8/v1") == "http://127.0.0.1:8/v1"
    assert without_credentials("https://api.deepseek.com/v1") == "https://api.deepseek.com/v1"
    assert without_credentials("sqlite:////tmp/m.db") == "sqlite:////tmp/m.db"
