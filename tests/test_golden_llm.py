"""The golden-set SOP through an OpenAI-compatible endpoint: the real ``openai`` client over HTTP
against the loopback server, with scripted replies that read the prompts they are sent."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from ragtrack.authoring.answer import parse_answer
from ragtrack.authoring.audit import NEEDS_CHANGE, PASS, parse_audit
from ragtrack.authoring.propose import parse_candidates
from ragtrack.cli import main
from ragtrack.llm.base import ParseError
from ragtrack.llm.fake_server import FakeOpenAIServer, default_reply

from .test_golden_authoring import DOCS, lines, zh_project

PASSAGE = re.compile(r"^\[(P\d+)\] \(([^>)]+?)(?: > [^)]*)?\)$", re.MULTILINE)
BROKEN = "保修"  # the scripted answerer garbles every item whose question mentions this


def scripted(request: dict) -> str:
    """A plausible reply to each golden-set step, built from the labels and documents in its prompt."""
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")  # a repair round adds more
    everything = " ".join(m["content"] for m in request["messages"])
    passages = PASSAGE.findall(user)  # (label, document)
    if '"candidates"' in everything:
        kind = re.search(r"(?:of type|道) ([ABCD])", user).group(1)
        first = passages[0]
        other = next(p for p in passages if p[1] != first[1])
        same = next(p for p in passages[1:] if p[1] == first[1])
        cited = {"A": [first], "B": [first, same], "C": [first, other], "D": [first, other]}[kind]
        question = {
            "A": "网关 Pro 从哪个版本开始支持 Matter？",
            "B": "选购时要考虑哪些兼容问题？",
            "C": f"{first[1]} 和 {other[1]} 讲的内容有什么不同？",
            "D": f"{first[1]} 提到的那个功能，在 {other[1]} 里怎么设置？",
        }[kind]
        candidate = {
            "question": question,
            "type": kind,
            "passages": [label for label, _ in cited],
            "solution_path": f"先看 {cited[0][0]}，再对照其余段落。",
            "draft_answer": "草拟答案。",
        }
        return "好的，候选题如下：\n```json\n" + json.dumps({"candidates": [candidate]}, ensure_ascii=False) + "\n```"
    if '{"answer"' in everything:
        if BROKEN in user.split("###")[1]:
            return "抱歉，我无法回答。"
        bodies = re.split(r"^\[P\d+\] \(.*\)$", user, flags=re.MULTILINE)[1:]
        first_sentences = [b.strip().split("。")[0] + "。" for b in bodies]
        return json.dumps({"answer": "".join(first_sentences)}, ensure_ascii=False)
    if '"verdict"' in everything:
        if len(passages) > 1:
            return (
                '｛"verdict"："需修改"，"unsupported"：[]，"missing"："", "superfluous": ["P2"], "reason": "P2 多余"｝'
            )
        return json.dumps({"verdict": "pass", "unsupported": [], "missing": "", "superfluous": [], "reason": "ok"})
    return default_reply(request)


@pytest.fixture
def endpoint():
    with FakeOpenAIServer(reply=scripted) as server:
        yield server, {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-golden-0000"}


def run(root, env, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args], env=env, catch_exceptions=False)


def test_the_sop_through_an_openai_compatible_endpoint(tmp_path, endpoint):
    server, env = endpoint
    root = zh_project(tmp_path / "qinghe")
    llm = ("--llm", "openai:qwen-test")
    result = run(root, env, "golden", "propose", *[a for d in DOCS for a in ("--doc", d)], "--n", "1", *llm)
    assert result.exit_code == 0, result.output
    candidates = lines(root / "candidates.jsonl")
    assert [c["type"] for c in candidates] == list("ABCD")
    assert all(c["proposer"].startswith("openai:qwen-test@http://127.0.0.1") for c in candidates)
    assert all("template" not in c["tags"] and not c["note"] for c in candidates)
    assert candidates[0]["gt_context_ids"] == [f"{DOCS[0]}#青禾智能常见问题/选购与兼容/网关-mini-和-pro-应该选哪一款"]
    assert candidates[0]["solution_path"].startswith(f"先看 {DOCS[0]}#")  # labels turned back into IDs
    assert len(server.log.requests) == 4  # one call per type
    assert server.log.requests[0]["response_format"]["type"] == "json_schema"

    ids = [a for c in candidates for a in ("--id", c["id"])]
    assert run(root, env, "golden", "accept", *ids).exit_code == 0
    result = run(root, env, "golden", "answer", *llm)
    assert result.exit_code == 0, result.output
    items = lines(root / "golden.jsonl")
    assert all(i["gt_answer"] for i in items) and "extracted" not in result.output
    assert "golden.answer" in result.output  # the accounting table

    result = run(root, env, "golden", "audit", *llm)
    assert result.exit_code == 1, result.output  # the scripted auditor finds P2 superfluous in multi-passage items
    report = (root / "audit.md").read_text(encoding="utf-8")
    assert "Auditor: openai:qwen-test@" in report and "superfluous GT passage: " in report
    assert "1/4 item(s) pass" in result.output

    served = server.log.served
    assert run(root, env, "golden", "audit", *llm).exit_code == 1
    assert server.log.served == served  # the response cache answered every call

    result = run(root, env, "golden", "validate")
    assert result.exit_code == 0, result.output
    result = run(root, env, "eval", "--version", "v1", "--judge", "openai:qwen-test")
    assert result.exit_code == 0, result.output
    assert "sk-test-golden-0000" not in "".join(p.read_text("utf-8", "ignore") for p in root.rglob("*.jsonl"))


def test_an_unreadable_answer_fails_that_item_only_and_is_retried_once(tmp_path, endpoint):
    server, env = endpoint
    root = zh_project(tmp_path / "qinghe")
    assert run(root, env, "golden", "propose", *[a for d in DOCS for a in ("--doc", d)], "--n", "1").exit_code == 0
    rows = lines(root / "candidates.jsonl")
    rows[0]["question"] = "官方商城买的网关，保修从哪天算起？"
    rows[0]["status"] = rows[1]["status"] = "accepted"
    (root / "candidates.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    assert run(root, env, "golden", "accept").exit_code == 0
    before = len(server.log.requests)
    result = run(root, env, "golden", "answer", "--llm", "openai:qwen-test")
    assert result.exit_code == 1
    assert f"{rows[0]['id']} failed: parse:" in result.output
    assert len(server.log.requests) - before == 3  # one good item; one bad item and its repair round
    items = {i["id"]: i for i in lines(root / "golden.jsonl")}
    assert items[rows[0]["id"]]["gt_answer"] == "" and items[rows[1]["id"]]["gt_answer"]


# ---------------------------------------------------------------- defensive parsing of untrusted replies


def test_candidates_are_read_from_fences_prose_and_partial_junk():
    out = parse_candidates(
        'Sure!\n```json\n{"candidates": [{"question": "Q1?", "type": "Type B", "passages": "P2"},'
        ' {"question": "", "type": "A", "passages": ["P1"]}, {"question": "Q3?", "type": "E", "passages": ["P1"]},'
        ' {"question": "Q4?", "type": "C", "passages": []}, 7]}\n```'
    )
    assert [(c.question, c.type, c.labels) for c in out.candidates] == [("Q1?", "B", ("P2",))]
    assert len(out.dropped) == 4
    assert parse_candidates('[{"question": "Q?", "type": "d", "passages": [3]}]').candidates[0].labels == ("3",)
    assert parse_candidates('{"candidates": []}').candidates == ()
    with pytest.raises(ParseError):
        parse_candidates('{"candidates": [{"question": "", "type": "A", "passages": ["P1"]}]}')
    with pytest.raises(ParseError):
        parse_candidates("no JSON at all")


def test_audit_verdicts_are_normalised_and_a_pass_with_problems_is_not_a_pass():
    assert parse_audit('{"verdict": "【通过】", "reason": "好"}').verdict == PASS
    v = parse_audit('{"verdict": "pass", "unsupported": "It reboots.", "missing": "none", "superfluous": []}')
    assert v.verdict == NEEDS_CHANGE and v.unsupported == ("It reboots.",) and v.missing == ""
    v = parse_audit('｛"verdict"："需修改"，"missing"：["步骤 3"]，"superfluous"：["P2"]｝')
    assert v.verdict == NEEDS_CHANGE and v.missing == "步骤 3" and v.superfluous == ("P2",)
    for bad in ('{"verdict": "maybe"}', '["pass"]', "通过"):
        with pytest.raises(ParseError):
            parse_audit(bad)


def test_answers_must_be_non_empty_json_strings():
    assert parse_answer('前言 {"answer": " 先配网，再添加。 "} 后记') == "先配网，再添加。"
    for bad in ('{"answer": ""}', '{"answer": 3}', '{"text": "x"}', '{"answer": "cut'):
        with pytest.raises(ParseError):
            parse_answer(bad)


def test_propose_asks_for_fewer_documents_rather_than_cutting_the_prompt(tmp_path, endpoint):
    from .conftest import REPO

    server, env = endpoint
    corpus = str(REPO / "golden" / "kb")  # 35 documents: far more than one prompt should carry
    result = run(tmp_path, env, "golden", "propose", "--corpus", corpus, "--doc", "nodes", "--doc", "models",
                 "--llm", "openai:qwen-test", "--golden", str(tmp_path / "g.jsonl"))  # fmt: skip
    assert result.exit_code == 2 and "propose from fewer --doc at a time" in result.output
    assert server.log.requests == [] and not (tmp_path / "candidates.jsonl").exists()


def test_a_follow_up_is_answered_and_audited_with_its_earlier_turns(tmp_path, endpoint):
    """ "那网关 Mini 呢？" names nothing by itself: the answer and audit prompts carry the turns before it,
    oldest first, and a lone question's prompt is what it was before items had history."""
    from .test_golden_authoring import MATTER

    server, env = endpoint
    root = zh_project(tmp_path / "qinghe")
    turns = [
        {"role": "user", "content": "青禾设备支持 Matter 吗？"},
        {"role": "assistant", "content": "网关 Pro 从固件 3.2.0 开始支持 Matter 桥接。"},
    ]
    base = {"type": "A", "gt_context_ids": [MATTER], "gt_answer": ""}
    rows = [
        {"id": "f1", "question": "那网关 Mini 呢？", "history": turns, **base},
        {"id": "l1", "question": "网关 Mini 支持 Matter 吗？", **base},
    ]
    (root / "golden.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")

    def prompts() -> dict[str, str]:
        """Question → the user message that asked about it, for the requests since the last look."""
        sent = [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in server.log.requests]
        server.log.requests.clear()
        return {q: next(u for u in sent if f"### 问题\n{q}" in u) for q in (rows[0]["question"], rows[1]["question"])}

    transcript = "user: 青禾设备支持 Matter 吗？\nassistant: 网关 Pro 从固件 3.2.0 开始支持 Matter 桥接。"
    for command in ("answer", "audit"):
        result = run(root, env, "golden", command, "--llm", "openai:qwen-test")
        assert result.exit_code in (0, 1) and "Traceback" not in result.output, result.output
        follow_up, lone = prompts().values()
        assert follow_up.startswith("### 对话中此前的轮次\n")
        assert f"{transcript}\n\n### 问题\n那网关 Mini 呢？" in follow_up
        assert lone.startswith("### 问题\n") and "对话中此前的轮次" not in lone and "user: " not in lone
        assert all(r["gt_answer"] for r in lines(root / "golden.jsonl"))
    from ragtrack.authoring import conversation
    from ragtrack.golden import Turn

    english = conversation([Turn(role="user", content="Which gateway supports Matter?")], "en")
    assert english.startswith("### Earlier turns of the conversation\n")
    assert english.endswith("\n\nuser: Which gateway supports Matter?\n\n") and conversation((), "en") == ""
