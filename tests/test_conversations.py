"""Follow-up questions: golden items with ``history``, and every agent kind handed the turns its
platform expects (the platform agents over real HTTP against the loopback stand-ins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrack.agent import AgentContext, build_agent
from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.errors import InputError
from ragtrack.golden import GoldenItem, Turn, load_golden
from ragtrack.pipeline.rewrite import resolve_follow_up
from ragtrack.spec import load_spec
from ragtrack.testing.coze_server import CozeServer
from ragtrack.testing.dify_server import DifyServer
from ragtrack.testing.ragflow_server import RagflowServer
from ragtrack.testing.server import LoopbackServer, Request, Response
from ragtrack.tracking.answering import asked, follow_up

from .conftest import pipeline_agent

HISTORY = (
    Turn(role="user", content="Tell me about the checkpoint loader."),
    Turn(role="assistant", content="It loads a full checkpoint file."),
)
FOLLOW_UP = "Where do its files go?"
CHECKPOINTS = "guides/models.md#model-files/checkpoints"


def test_history_is_validated_with_file_line_and_field(tiny_corpus, tmp_path):
    good = {"id": "x", "question": "And its default?", "type": "A", "gt_context_ids": ["notes.txt"], "gt_answer": "a"}
    rows = [
        {
            **good,
            "history": [{"role": "user", "content": "What is cfg?"}, {"role": "assistant", "content": "A scale."}],
        },
        {**good, "id": "y", "history": [{"role": "system", "content": "be brief"}]},  # line 2: unknown role
        {**good, "id": "z", "history": [{"role": "user", "content": "  "}]},  # line 3: empty turn
        {**good, "id": "w", "history": [{"role": "assistant", "content": "Hello."}]},  # line 4: no user turn
        {**good, "id": "v", "history": "What is cfg?"},  # line 5: not a list of turns
    ]
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_golden(path, tiny_corpus)
    got = [str(p) for p in e.value.problems]
    assert any(g.startswith(f"{path}:2: history.0.role:") and "'user'" in g for g in got), got
    assert f"{path}:3: history.0.content: must not be empty" in got
    assert any(g.startswith(f"{path}:4: history:") and "no user turn" in g for g in got), got
    assert any(g.startswith(f"{path}:5: history:") for g in got), got
    assert len(got) == 4


def test_history_changes_the_digest_and_a_lone_question_keeps_the_one_it_had():
    lone = GoldenItem(id="x", question="q?", type="A", gt_context_ids=("notes.txt",), gt_answer="a")
    assert "history" not in lone.digest_fields() and "history" not in lone.to_line()
    follow = lone.model_copy(update={"history": HISTORY})
    assert follow.digest_fields()["history"][0] == {"role": "user", "content": HISTORY[0].content}
    assert GoldenItem.model_validate_json(follow.to_line()) == follow


@pytest.mark.parametrize(
    ("history", "question", "standalone"),
    [
        (HISTORY, FOLLOW_UP, "checkpoint loader Where do its files go?"),
        # Only the last user turn is read, and words the question already has are not repeated.
        (
            [Turn(role="user", content="cfg scale"), Turn(role="user", content="negative prompt")],
            "prompt?",
            "negative prompt?",
        ),
        ([Turn(role="user", content="Sampler steps")], "Steps past 30?", "sampler Steps past 30?"),
        (
            [Turn(role="user", content="介绍一下采样器的步数设置")],
            "超过30有用吗？",
            "介绍一下采样器步数设置 超过30有用吗？",
        ),
        ([Turn(role="assistant", content="Hi, how can I help?")], "What is cfg?", "What is cfg?"),
    ],
)
def test_the_offline_rewrite_carries_the_previous_questions_subject(history, question, standalone):
    assert resolve_follow_up(question, history) == standalone


def test_v5_resolves_a_follow_up_and_v1_answers_it_as_it_stands(project, tiny_corpus, embedder):
    v1 = pipeline_agent(project, tiny_corpus, embedder, "v1").answer(FOLLOW_UP, HISTORY)
    v5 = pipeline_agent(project, tiny_corpus, embedder, "v5").answer(FOLLOW_UP, HISTORY)
    assert v1.queries == [FOLLOW_UP]  # no rewrite step: the follow-up is retrieved as it stands
    rewrite = next(s for s in v5.stages if s.name == "rewrite")
    assert rewrite.inputs == {"question": FOLLOW_UP, "history": [t.model_dump() for t in HISTORY]}
    assert rewrite.outputs["standalone"] == v5.queries[0] == "checkpoint loader Where do its files go?"
    assert v5.contexts[0].passage_ids == (CHECKPOINTS,)  # the resolved question finds the passage first


@pytest.mark.parametrize(
    ("question", "follow_up"),
    [
        ("How do I install it?", True),
        ("And the price?", True),
        ("那它的价格呢？", True),
        ("How many steps does FLUX.1 schnell need?", False),
        ("Which folder do LoRA files go in?", False),
        ("采样器默认多少步？", False),
    ],
)
def test_a_question_that_points_back_or_names_nothing_is_read_as_a_follow_up(question, follow_up):
    from ragtrack.pipeline.rewrite import looks_like_follow_up

    assert looks_like_follow_up(question) is follow_up


def test_a_follow_up_travels_through_the_pyfunc_string_column():
    text = follow_up(FOLLOW_UP, HISTORY)
    assert asked(text) == (FOLLOW_UP, HISTORY)
    assert follow_up(FOLLOW_UP, ()) == FOLLOW_UP and asked(FOLLOW_UP) == (FOLLOW_UP, ())
    assert asked('{"question": "a json-looking question"}') == ('{"question": "a json-looking question"}', ())


# ------------------------------------------------------------------------ platforms over HTTP
def external(project: Path, name: str, agent: str):
    (project / "pipelines" / f"{name}.toml").write_text(f'[version]\nname = "{name}"\n\n[agent]\n{agent}\n')
    config = load_config(project)
    return build_agent(
        load_spec(name, project / "pipelines"), AgentContext(load_corpus(project / "golden" / "kb"), config)
    )


def test_a_dify_chat_app_replays_the_user_turns_in_one_conversation(project, monkeypatch):
    monkeypatch.setenv("DIFY_APP_KEY", "app-conversation-key")
    with DifyServer(project / "golden" / "kb", app_key="app-conversation-key", max_chars=200) as server:
        agent = external(
            project, "dify-chat", f'kind = "dify"\nbase_url = "{server.base_url}"\napi_key_env = "DIFY_APP_KEY"'
        )
        output = agent.answer(FOLLOW_UP, HISTORY)
        sent = [x.request.body for x in server.replies("chat_messages")]
        replies = [x.response.body for x in server.replies("chat_messages")]
    assert output.answered and not output.errors
    # The user turn first (the assistant's turn is the app's own to give), then the question in its conversation.
    assert [b["query"] for b in sent] == [HISTORY[0].content, FOLLOW_UP]
    assert "conversation_id" not in sent[0] and sent[1]["conversation_id"] == replies[0]["conversation_id"]


def test_a_dify_completion_app_takes_the_turns_as_an_input_or_says_it_cannot(project, monkeypatch):
    monkeypatch.setenv("DIFY_APP_KEY", "app-completion-key")
    with DifyServer(
        project / "golden" / "kb", app_key="app-completion-key", max_chars=200, app_mode="completion"
    ) as server:
        base = f'kind = "dify"\nbase_url = "{server.base_url}"\napi_key_env = "DIFY_APP_KEY"\napp_mode = "completion"'
        refused = external(project, "dify-completion", base).answer(FOLLOW_UP, HISTORY)
        taken = external(project, "dify-completion-h", base + '\nhistory_input = "conversation"').answer(
            FOLLOW_UP, HISTORY
        )
        sent = [x.request.body for x in server.replies("completion_messages")]
    assert not refused.answered and "set history_input" in refused.errors[0]
    assert taken.answered and len(sent) == 1
    assert sent[0]["inputs"]["conversation"] == f"user: {HISTORY[0].content}\nassistant: {HISTORY[1].content}"


def test_ragflow_and_coze_receive_the_turns_before_the_question(project, monkeypatch):
    monkeypatch.setenv("RAGFLOW_KEY", "ragflow-conversation-key")
    monkeypatch.setenv("COZE_TOKEN", "pat_conversation_token")
    turns = [t.model_dump() for t in HISTORY]
    with RagflowServer(project / "golden" / "kb", api_key="ragflow-conversation-key", max_chars=300) as ragflow:
        spec = f'kind = "ragflow"\nbase_url = "{ragflow.base_url}"\napi_key_env = "RAGFLOW_KEY"\n'
        spec += f'chat_id = "{ragflow.chat_id}"'
        assert external(project, "ragflow-chat", spec).answer(FOLLOW_UP, HISTORY).answered
        messages = ragflow.replies("chat_completions")[0].request.body["messages"]
    assert messages == [*turns, {"role": "user", "content": FOLLOW_UP}]
    with CozeServer(project / "golden" / "kb", token="pat_conversation_token", max_chars=200) as coze:
        spec = (
            f'kind = "coze"\nbase_url = "{coze.base_url}"\napi_key_env = "COZE_TOKEN"\nbot_id = "{coze.bot_id}"\n'
            "poll_interval_s = 0.01"
        )
        assert external(project, "coze-bot", spec).answer(FOLLOW_UP, HISTORY).answered
        sent = next(x.request.body for x in coze.exchanges if x.request.path == "/v3/chat")
    assert [(m["role"], m["type"], m["content"]) for m in sent["additional_messages"]] == [
        ("user", "question", HISTORY[0].content),
        ("assistant", "answer", HISTORY[1].content),
        ("user", "question", FOLLOW_UP),
    ]


class EchoTurns(LoopbackServer):
    """An HTTP agent that answers with what it was sent (no retrieval to speak of)."""

    ROUTES = [("POST", r"/ask", "ask")]

    def error(self, status: int, code: str, message: str) -> Response:
        return Response(status, {"error": message})

    def ask(self, request: Request) -> Response:
        return Response(200, {"answer": json.dumps(request.body), "contexts": []})


@pytest.mark.parametrize(
    ("body", "where"),
    [('{ q = "{question}" }', "history"), ('{ q = "{question}", turns = "{history}" }', "turns")],
    ids=["top-level", "placed"],
)
def test_an_http_agent_receives_the_turns_in_its_body(project, body, where):
    with EchoTurns() as server:
        agent = external(project, "http-agent", f'kind = "http"\nurl = "{server.base_url}/ask"\nbody = {body}')
        sent = json.loads(agent.answer(FOLLOW_UP, HISTORY).answer)
        lone = json.loads(agent.answer("What is cfg?").answer)
    assert sent == {"q": FOLLOW_UP, where: [t.model_dump() for t in HISTORY]}
    assert lone == {"q": "What is cfg?", **({"turns": []} if where == "turns" else {})}


def test_a_python_agent_receives_the_turns_or_says_how_to_take_them(project):
    (project / "turns_agent.py").write_text(
        "def with_history(question, history=()):\n"
        "    return {'answer': f'{len(history)} turns before: {question}', 'contexts': []}\n\n"
        "def question_only(question):\n"
        "    return {'answer': question, 'contexts': []}\n\n"
        "def keyed(inputs):\n"
        "    return {'answer': str(inputs), 'contexts': []}\n"
    )
    said = external(project, "py-h", 'kind = "python"\ntarget = "turns_agent:with_history"').answer(FOLLOW_UP, HISTORY)
    assert said.answer == f"2 turns before: {FOLLOW_UP}"
    refused = external(project, "py-q", 'kind = "python"\ntarget = "turns_agent:question_only"').answer(
        FOLLOW_UP, HISTORY
    )
    assert not refused.answered and "set input_key" in refused.errors[0]
    keyed = external(project, "py-k", 'kind = "python"\ntarget = "turns_agent:keyed"\ninput_key = "query"')
    assert keyed.answer(FOLLOW_UP, HISTORY).answer == str(
        {"query": FOLLOW_UP, "history": [t.model_dump() for t in HISTORY]}
    )


@pytest.mark.slow
def test_the_conversations_walkthrough_runs_and_prints_what_the_page_shows(tmp_path, shipped):
    """docs/conversations.md as written, on a copy of the shipped project with the session's caches
    (v1's and v5's indexes of the shipped KB: built once per run, not again here)."""
    import re
    import shutil

    from .readme import ROOT, output, run_shell, walkthrough

    project = tmp_path / "project"
    for folder in ("pipelines", "golden", "examples"):
        shutil.copytree(ROOT / folder, project / folder)
    shutil.copytree(shipped[0] / ".ragtrack" / "cache", project / ".ragtrack" / "cache")
    done = run_shell("set -e\n" + walkthrough("conversations"), project, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr

    def folded(line: str) -> str:
        return re.sub(r"\s+", " ", line).strip()

    printed = {folded(line) for line in done.stdout.splitlines()}
    missing = [line for line in output("conversations") if folded(line) not in printed]
    assert not missing, "the page shows lines the walkthrough did not print:\n" + "\n".join(missing)


def test_triage_reads_a_follow_up_with_its_conversation(project, tmp_path):
    """Two users ask "How do I install it?" after different questions. As they stand they are one
    question (the same words); `logs triage` reads them with their conversations as pulled into the
    store, so the ComfyUI-Manager one joins the standalone question about installing ComfyUI-Manager
    and the LoRA one stays apart. Through the CLI: without the conversations passed to the clustering,
    the two follow-ups are one cluster and this fails."""
    from click.testing import CliRunner

    from ragtrack.cli import main

    def said(mid: str, question: str, minute: int, conversation: str | None, rating=None) -> dict:
        row = {
            "message_id": mid,
            "question": question,
            "answer": "…",
            "contexts": [],
            "rating": rating,
            "user": f"user-{mid}",
            "created_at": f"2025-03-01T09:{minute:02d}:00Z",
            "app_version": "bot",
        }
        return row | ({"conversation_id": conversation} if conversation else {})  # fmt: skip

    rows = [
        said("m1", "What is ComfyUI-Manager?", 0, "c1"),
        said("m2", "How do I install it?", 1, "c1", "dislike"),
        said("l1", "What is a LoRA?", 2, "c2"),
        said("l2", "How do I install it?", 3, "c2", "dislike"),
        said("s1", "How do I install ComfyUI-Manager?", 4, None, "dislike"),
    ]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cli = CliRunner()
    pulled = cli.invoke(main, ["--root", str(project), "logs", "pull", "--from", "jsonl", str(export)])
    assert pulled.exit_code == 0, pulled.output
    out = tmp_path / "triage.json"
    result = cli.invoke(main, ["--root", str(project), "logs", "triage", "--sample-rate", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    clusters = [set(c["message_ids"]) for c in json.loads(out.read_text(encoding="utf-8"))]
    with_m2 = next(c for c in clusters if "m2" in c)
    assert "s1" in with_m2 and "l2" not in with_m2, clusters


def test_a_follow_up_golden_set_evaluates_on_a_dify_chat_app(project, monkeypatch):
    """The eval path end to end over real HTTP: the item's turns are replayed in one Dify conversation,
    its record and trace keep them, and its retrieval is scored from the follow-up's own reply."""
    from ragtrack.api import evaluate

    monkeypatch.setenv("DIFY_APP_KEY", "app-follow-up-key")
    item = {
        "id": "f1",
        "type": "A",
        "history": [t.model_dump() for t in HISTORY],
        "question": FOLLOW_UP,
        "gt_context_ids": [CHECKPOINTS],
        "gt_answer": "Full checkpoints go in models/checkpoints.",
    }
    (project / "golden" / "golden.jsonl").write_text(json.dumps(item) + "\n")
    with DifyServer(project / "golden" / "kb", app_key="app-follow-up-key", max_chars=200) as server:
        spec = f'kind = "dify"\nbase_url = "{server.base_url}"\napi_key_env = "DIFY_APP_KEY"'
        (project / "pipelines" / "dify-chat.toml").write_text(f'[version]\nname = "dify-chat"\n\n[agent]\n{spec}\n')
        report = evaluate("dify-chat", root=project)
        sent = [x.request.body for x in server.replies("chat_messages")]
        replied = [x.response.body for x in server.replies("chat_messages")]
    (record,) = report.records
    assert record.history == [t.model_dump() for t in HISTORY] and record.answered
    assert [b["query"] for b in sent] == [HISTORY[0].content, FOLLOW_UP] and sent[1]["conversation_id"]
    resources = sorted(replied[1]["metadata"]["retriever_resources"], key=lambda r: r["position"])
    assert [c.unit_id for c in record.contexts] == [r["segment_id"] for r in resources]  # the follow-up's reply
