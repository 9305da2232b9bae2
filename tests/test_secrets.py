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


def test_ragtrack_own_text_loses_secret_values_but_keeps_key_shaped_words(monkeypatch):
    """Params, descriptions and errors hold passage IDs: `guides/key-concepts-overview.md` is no key."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    text = f"unknown LLM 'openai:{KEY}'; GT guides/key-concepts-overview.md#setup"
    assert secrets.redact_values(text) == "unknown LLM 'openai:***'; GT guides/key-concepts-overview.md#setup"


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
    # A key in the query (Azure-style gateways): it was in the judge identity, params, tags and messages.
    assert (
        without_credentials("http://gw/v1?api-key=QUERYKEY43&deployment=gpt")
        == "http://gw/v1?api-key=***&deployment=gpt"
    )
    assert without_credentials("http://gw/v1?access_token=t0k&x") == "http://gw/v1?access_token=***&x"


def test_a_key_pasted_as_a_model_name_or_in_a_base_url_query_is_written_nowhere(project, monkeypatch):
    """``--judge openai:<the key>`` and ``base_url = "…/v1?api-key=…"`` put the key into the judge params,
    the judge-identity tag, the run description and endpoints.json."""
    from click.testing import CliRunner

    from ragtrack.cli import main
    from ragtrack.llm.fake_server import FakeOpenAIServer

    query_key = "QUERYKEYJOURNEY4321"
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        evaluate("v1", root=project, judge=f"openai:{KEY}", limit=1)
        (project / "ragtrack.toml").write_text(
            f'[profiles.gateway]\nbase_url = "{server.base_url}?api-key={query_key}"\nmodel = "m"\n'
        )
        evaluate("v1", root=project, judge="gateway", limit=1)
        result = CliRunner().invoke(main, ["--root", str(project), "eval", "--version", "v1", "--judge", KEY])
    assert result.exit_code == 2 and "unknown LLM '***'" in result.output and KEY not in result.output
    files = [p for p in project.rglob("*") if p.is_file() and p.name != "ragtrack.toml"]
    assert any("mlruns" in p.parts for p in files) and any(p.name == "endpoints.json" for p in files)
    leaked = [p for p in files if KEY.encode() in p.read_bytes() or query_key.encode() in p.read_bytes()]
    assert not leaked, leaked
