"""Building a golden set from a folder of Chinese Markdown documents, offline, as docs/golden-set.md walks it.

Real files, the real corpus loader, real indexes and a real MLflow store; the
commands run through the CLI exactly as a user types them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.cli import main

from .conftest import DATA, REPO

DOCS = ["faq.md", "firmware-update.md", "network-setup-guide.md", "qinghe-app-guide.md", "warranty-policy.md"]
MATTER = "faq.md#青禾智能常见问题/选购与兼容/青禾设备支持-matter-吗"


def run(root: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


def zh_project(root: Path) -> Path:
    """The golden-set page's project: the .md files of the example KB, the shipped pipelines, a ragtrack.toml."""
    (root / "docs").mkdir(parents=True)
    for name in DOCS:
        shutil.copy(REPO / "examples" / "zh-kb" / "docs" / name, root / "docs" / name)
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    (root / "ragtrack.toml").write_text('[project]\ncorpus = "docs"\ngolden = "golden.jsonl"\n', encoding="utf-8")
    return root


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return zh_project(tmp_path / "qinghe")


def propose_all(root: Path) -> list[dict]:
    result = run(root, "golden", "propose", *[a for d in DOCS for a in ("--doc", d)], "--n", "2")
    assert result.exit_code == 0, result.output
    return lines(root / "candidates.jsonl")


def test_offline_walkthrough_from_folder_to_stale_items(project):
    """The golden-set page's walkthrough: propose → accept → answer → audit → validate → eval → edit → stale."""
    candidates = propose_all(project)
    assert {c["type"] for c in candidates} == set("ABCD")
    assert all(c["proposer"] == "offline-template" and "template" in c["tags"] for c in candidates)
    assert all("离线模板" in c["note"] for c in candidates)  # honest about what wrote them
    assert all(c["gt_context_ids"] == c["suggested_gt"] and c["draft_answer"] for c in candidates)
    assert not (project / "golden.jsonl").exists()  # never straight into the golden set

    result = run(project, "golden", "accept", "--id", "a001", "--id", "b001", "--id", "c001", "--id", "d001")
    assert result.exit_code == 0, result.output
    items = lines(project / "golden.jsonl")
    assert [i["id"] for i in items] == ["a001", "b001", "c001", "d001"]
    assert all(i["gt_answer"] == "" and set(i["gt_fingerprint"]) == set(i["gt_context_ids"]) for i in items)
    assert {c["id"] for c in lines(project / "candidates.jsonl")} == {"a002", "b002", "c002", "d002"}

    result = run(project, "golden", "validate")
    assert result.exit_code == 1 and "no GT answer yet" in result.output

    result = run(project, "golden", "answer")
    assert result.exit_code == 0, result.output
    assert "extracted from the GT passages" in result.output
    answers = {i["id"]: i["gt_answer"] for i in lines(project / "golden.jsonl")}
    assert "3.2.0" in answers["a001"]  # the blanked fact, extracted from its GT passage

    result = run(project, "golden", "audit")
    assert result.exit_code == 0, result.output
    assert "4/4 item(s) pass" in result.output and "heuristic" in result.output
    assert "offline lexical audit" in (project / "audit.md").read_text(encoding="utf-8")

    result = run(project, "golden", "validate")
    assert result.exit_code == 0, result.output

    result = run(project, "eval", "--version", "v1")
    assert result.exit_code == 0, result.output
    assert all(f"type {t}" in result.output for t in "ABCD")

    faq = project / "docs" / "faq.md"
    faq.write_text(faq.read_text(encoding="utf-8").replace("3.2.0", "3.3.0"), encoding="utf-8")
    result = run(project, "golden", "validate")
    assert result.exit_code == 1
    stale = [line for line in result.output.splitlines() if line.startswith("stale GT")]
    assert len(stale) == 2  # exactly the two items whose GT holds the edited passage
    assert all(f"{MATTER} changed" in line for line in stale)
    assert any(":1: a001:" in line for line in stale) and any(":4: d001:" in line for line in stale)

    result = run(project, "eval", "--version", "v1")
    assert result.exit_code == 2 and "2 item(s) have stale GT" in result.output
    assert "a001" in result.output and "d001" in result.output and "b001" not in result.output
    result = run(project, "eval", "--version", "v1", "--allow-stale")
    assert result.exit_code == 0, result.output
    # Said before the first item and after the table, and on the run's page (it was on its dataset only).
    caution = "--allow-stale: 2 item(s) scored against GT passages the corpus changed or removed since they were"
    assert result.output.count(caution) == 2, result.output
    from ragtrack.api import run_markdown

    run_id = next(line.split()[1] for line in result.output.splitlines() if line.startswith("run "))
    assert caution in run_markdown(run_id, root=project)
    from ragtrack.config import load_config
    from ragtrack.tracking.store import open_store

    assert open_store(load_config(project)).run_summary(run_id).stale_gt  # kept off the experiment's leaderboard

    result = run(project, "golden", "fingerprint", "--item", "a001", "--item", "d001")
    assert result.exit_code == 0 and "a001, d001" in result.output
    assert run(project, "golden", "validate").exit_code == 0


def test_candidates_marked_accepted_are_moved_and_status_is_required(project):
    propose_all(project)
    result = run(project, "golden", "accept")
    assert result.exit_code == 2 and '"status": "accepted"' in result.output
    path = project / "candidates.jsonl"
    rows = lines(path)
    rows[1]["status"] = "accepted"
    rows[1]["question"] = "Zigbee 兼容的是哪个版本的标准？"  # a reviewer's rewrite
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    result = run(project, "golden", "accept")
    assert result.exit_code == 0, result.output
    assert [i["question"] for i in lines(project / "golden.jsonl")] == ["Zigbee 兼容的是哪个版本的标准？"]
    assert rows[1]["id"] not in {c["id"] for c in lines(path)}


def test_accept_validates_every_chosen_candidate_and_moves_nothing_on_a_problem(project):
    propose_all(project)
    path = project / "candidates.jsonl"
    rows = lines(path)
    by_id = {r["id"]: r for r in rows}
    by_id["a001"]["gt_context_ids"] = ["faq.md#no-such-section"]
    by_id["b001"]["gt_context_ids"] = by_id["c001"]["gt_context_ids"]  # B across two documents
    by_id["c001"]["question"] = "  "
    by_id["d001"]["type"] = "E"  # a line that does not parse: it was reported alone, the others a run later
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    before = path.read_bytes()
    result = run(project, "golden", "accept", "--id", "a001", "--id", "b001", "--id", "c001")
    assert result.exit_code == 2, result.output
    assert f"{path}:1: gt_context_ids: unknown context id 'faq.md#no-such-section'" in result.output
    assert f"{path}:3: gt_context_ids: type B keeps its GT passages in one document" in result.output
    assert f"{path}:5: question: must not be empty" in result.output
    d_line = [r["id"] for r in rows].index("d001") + 1
    assert f"{path}:{d_line}: type: unknown value 'E'" in result.output
    assert "Traceback" not in result.output and result.output.count(str(path)) == 4
    assert path.read_bytes() == before and not (project / "golden.jsonl").exists()


def test_accept_after_a_crash_between_its_two_writes_finishes_the_move(project):
    """The golden set is written before the candidates file: a crash in between leaves the item in both,
    and running accept again only drops it from the candidates."""
    propose_all(project)
    rows = lines(project / "candidates.jsonl")
    assert run(project, "golden", "accept", "--id", "a001").exit_code == 0
    (project / "candidates.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )  # as if the second write never happened
    result = run(project, "golden", "accept", "--id", "a001")
    assert result.exit_code == 0 and "already in the golden set" in result.output
    assert [i["id"] for i in lines(project / "golden.jsonl")] == ["a001"]
    assert "a001" not in {c["id"] for c in lines(project / "candidates.jsonl")}
    result = run(project, "golden", "accept", "--id", "a001")  # once more: not a typo, and it says so
    assert result.exit_code == 2 and "no candidate a001 in" in result.output
    assert "(a001 already in the golden set)" in result.output


def test_propose_rejects_multi_document_types_for_one_document_and_dedupes(project):
    result = run(project, "golden", "propose", "--doc", "faq.md", "--types", "C")
    assert result.exit_code == 2 and "need passages of at least two documents" in result.output
    result = run(project, "golden", "propose", "--doc", "faq.md")
    assert result.exit_code == 0 and "types C and D skipped" in result.output
    first = lines(project / "candidates.jsonl")
    assert {c["type"] for c in first} == {"A", "B"} and {c["source_documents"][0] for c in first} == {"faq.md"}
    again = run(project, "golden", "propose", "--doc", "faq.md")
    assert "already proposed" in again.output  # the template proposer proposes the same ones first...
    second = lines(project / "candidates.jsonl")
    added = second[len(first) :]
    assert second[: len(first)] == first and added, "...so it was asked for more: new ones, not none"
    assert all(1 <= sum(c["type"] == t for c in added) <= 2 for t in "AB"), "up to n (2) new ones per type"
    assert len({c["question"] for c in second}) == len(second), "no question proposed twice"
    result = run(project, "golden", "propose", "--doc", "nope.md")
    assert result.exit_code == 2 and "no document 'nope.md'" in result.output


def test_audit_names_the_unsupported_sentence_and_the_superfluous_passage_and_exits_1(project):
    propose_all(project)
    assert run(project, "golden", "accept", "--id", "a001", "--id", "c001").exit_code == 0
    assert run(project, "golden", "answer").exit_code == 0
    path = project / "golden.jsonl"
    items = lines(path)
    invented = "固件升级后网关会自动重启三次并清空全部自动化。"
    items[0]["gt_answer"] += invented
    extra = "warranty-policy.md#青禾智能产品保修政策/保修期限/网关类产品"
    items[1]["gt_context_ids"].append(extra)
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    result = run(project, "golden", "audit", "--report", str(project / "audit.json"))
    assert result.exit_code == 1, result.output
    report = json.loads((project / "audit.json").read_text(encoding="utf-8"))
    by_id = {r["item_id"]: r for r in report["items"]}
    assert by_id["a001"]["verdict"] == "needs_change" and by_id["a001"]["unsupported"] == [invented]
    assert by_id["c001"]["verdict"] == "needs_change" and by_id["c001"]["superfluous"] == [extra]
    assert report["auditor"].startswith("offline lexical audit")


def test_audit_and_validate_flag_items_without_answers(project):
    propose_all(project)
    assert run(project, "golden", "accept", "--id", "b001").exit_code == 0
    result = run(project, "golden", "audit")
    assert result.exit_code == 1 and "no GT answer yet" in result.output
    result = run(project, "eval", "--version", "v1")
    assert (
        result.exit_code == 2 and "no GT answer yet" in result.output and ": b001: gt_answer is empty" in result.output
    )


def test_a_gt_passage_that_disappears_is_stale_not_a_typo(project):
    propose_all(project)
    assert run(project, "golden", "accept", "--id", "a001", "--id", "b001").exit_code == 0
    assert run(project, "golden", "answer").exit_code == 0
    faq = project / "docs" / "faq.md"
    faq.write_text(faq.read_text(encoding="utf-8").replace("### 青禾设备支持 Matter 吗？", "### Matter"), "utf-8")
    result = run(project, "golden", "validate")
    assert result.exit_code == 1 and f"a001: GT passage {MATTER} disappeared from the corpus" in result.output
    assert "point the gt_context_ids of a001 at the passages' new IDs (`ragtrack corpus search" in result.output
    result = run(project, "eval", "--version", "v1")  # the same advice where eval refuses
    assert result.exit_code == 2 and "point the gt_context_ids of a001 at the passages' new IDs" in result.output
    result = run(project, "golden", "fingerprint", "--id", "a001")
    assert result.exit_code == 2 and "fix the items' gt_context_ids first" in result.output


def test_a_gt_passage_whose_text_moved_to_another_id_is_pointed_at_it(tmp_path):
    """A paragraph added at the top of a .txt shifts its positional IDs: the advice was to accept the
    GT ID's new text, which pointed the item at the neighbouring paragraph (only `audit` caught it)."""
    from ragtrack.corpus import load_corpus
    from ragtrack.golden import GoldenItem, load_golden, stale_advice, staleness, with_fingerprint

    kb = tmp_path / "kb"
    kb.mkdir()
    paragraphs = [f"Paragraph {n}: " + "words about backups and restores. " * 40 for n in range(4)]
    (kb / "notes.txt").write_text("\n\n".join(paragraphs), encoding="utf-8")
    before = load_corpus(kb)
    old = next(pid for pid, p in before.passages.items() if p.text.startswith("Paragraph 2"))
    item = GoldenItem(id="a1", question="How long?", type="A", gt_context_ids=[old], gt_answer="Thirty days.")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(with_fingerprint(item, before).to_line() + "\n", encoding="utf-8")

    (kb / "notes.txt").write_text("\n\n".join(["A new opening. " * 60, *paragraphs]), encoding="utf-8")
    after = load_corpus(kb)
    new = next(pid for pid, p in after.passages.items() if p.text.startswith("Paragraph 2"))
    assert new != old and after.passages[new].text == before.passages[old].text
    [stale] = staleness(load_golden(golden, after), after)
    assert stale.moved == ((old, new),) and f"(its text is now {new})" in str(stale)
    advice = stale_advice([stale])
    assert "in a1, replace each GT ID whose text moved by the ID it is now at" in advice
    assert "to accept the new text" not in advice

    # A GT ID added by hand has no fingerprint: the advice was "which eval refuses: ; or pass --allow-stale".
    first = next(iter(after.passages))
    row = json.loads(golden.read_text(encoding="utf-8"))
    row["gt_context_ids"] = [new, first]
    row["gt_fingerprint"] = {new: row["gt_fingerprint"][old]}
    golden.write_text(json.dumps(row) + "\n", encoding="utf-8")
    [stale] = staleness(load_golden(golden, after), after)
    assert stale.unrecorded == (first,)
    advice = stale_advice([stale])
    assert advice.startswith("check the GT passages added to a1 by hand, then `ragtrack golden fingerprint --id a1`")


def test_fingerprints_stay_out_of_the_digest_of_the_shipped_golden_set(tmp_path):
    """The docs' measured tables quote digest b3659caab4e0ee6f: recording fingerprints must not move it."""
    from ragtrack.corpus import load_corpus
    from ragtrack.golden import load_golden

    corpus = load_corpus(REPO / "golden" / "kb")
    shipped = load_golden(REPO / "golden" / "golden.jsonl", corpus)
    assert shipped.digest == "b3659caab4e0ee6f"
    assert all(i.gt_fingerprint for i in shipped.items)  # the shipped set carries them
    bare = tmp_path / "golden.jsonl"
    bare.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "gt_fingerprint"}, ensure_ascii=False) + "\n"
            for line in (REPO / "golden" / "golden.jsonl").read_text(encoding="utf-8").splitlines()
        ),
        encoding="utf-8",
    )
    assert load_golden(bare, corpus).digest == shipped.digest


def test_fingerprint_rewrites_only_items_without_one_and_keeps_other_lines(tmp_path):
    from .conftest import make_project

    root = make_project(tmp_path / "p")
    path = root / "golden" / "golden.jsonl"
    original = path.read_text(encoding="utf-8").splitlines()
    result = run(root, "golden", "fingerprint")
    assert result.exit_code == 0 and "fingerprinted 5 item(s)" in result.output
    assert run(root, "golden", "fingerprint").output.startswith("fingerprinted 0 item(s)")
    now = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(a)["id"] for a in original] == [json.loads(b)["id"] for b in now]
    assert all(
        {**json.loads(a), "gt_fingerprint": json.loads(b)["gt_fingerprint"]} == json.loads(b)
        for a, b in zip(original, now, strict=True)
    )
    assert (DATA / "golden.jsonl").read_text(encoding="utf-8").splitlines() == original  # test data untouched


def test_the_offline_answer_skips_table_rows_and_headings_and_keeps_chinese_full_stops():
    """It glued a .txt heading to the next sentence (`1.2 macOS 驱动macOS 会…`) and answered with
    table rows; `golden audit` then failed its own answer."""
    from ragtrack.authoring.answer import extractive_answer
    from ragtrack.corpus import Passage

    table = "| 项目 | 要求 |\n|---|---|\n| 驱动 | 自动 |"
    text = f"1.2 macOS 驱动\nmacOS 会自动安装打印机驱动\n{table}\n安装后需要重启打印机。"
    passage = Passage(
        id="p.txt#macos-驱动", text=text, doc_id="p.txt", start=0, end=len(text), heading_path=("macOS 驱动",)
    )
    answer = extractive_answer("macOS 怎么安装打印机驱动？", (passage,), "zh")
    assert answer == "macOS 会自动安装打印机驱动。安装后需要重启打印机。"
    table_only = Passage(id="t.md#表", text="| 项目 | 要求 |\n| 驱动 | 自动 |", doc_id="t.md", start=0, end=20)
    assert "| 驱动 | 自动 |" in extractive_answer("驱动要求？", (table_only,), "zh")  # nothing else to say


def test_a_type_b_template_lists_distinct_parts_and_takes_at_most_the_first_ones():
    """A section of 11 subsections (the first split in ~pN paragraphs) got "List the points of all 4 of
    its parts" with a GT of 4 paragraphs of its first subsection."""
    from ragtrack.authoring.propose import MAX_PARTS, ProposeInput, template_candidates
    from ragtrack.corpus import split_markdown

    long_part = "\n\n".join(f"Ethiopia paragraph {n}. " + "Coffee grows in the highlands here. " * 20 for n in range(4))
    regions = "".join(f"\n\n## Region {n}\n\nRegion {n} grows coffee at altitude." for n in range(10))
    encyclopedia = split_markdown("origins.md", f"# Origins\n\n## Ethiopia\n\n{long_part}{regions}\n")
    assert sum("ethiopia~p" in p.id for p in encyclopedia.passages) >= 2
    troubles = split_markdown(
        "troubles.md", "# Troubles\n\n## Too fast\n\nGrind finer.\n\n## Too slow\n\nGrind coarser.\n"
    )
    passages = (*encyclopedia.passages, *troubles.passages)
    first, second = template_candidates(ProposeInput("B", 2, passages, "en"))

    def ids(candidate):
        return [passages[int(label[1:]) - 1].id for label in candidate.labels]

    # A section whose every part fits comes first, and "all" is true of it.
    assert first.question == "What are the main points about troubles?"  # of its topic, not of its parts
    assert ids(first) == ["troubles.md#troubles/too-fast", "troubles.md#troubles/too-slow"]
    # The long one is asked about its first parts, one passage per subsection.
    assert second.question == "What are the main points about origins?"
    assert len(second.labels) == MAX_PARTS
    assert ids(second) == ["origins.md#origins/ethiopia", *(f"origins.md#origins/region-{n}" for n in range(3))]


def test_a_paragraph_inserted_at_the_top_of_a_long_section_is_traced_to_where_it_moved(tmp_path):
    """The section's first passage carries its heading line, its ~pN splits do not: the old first
    paragraph, now at ~p2, was reported "changed" and the advice dropped it from the GT."""
    from ragtrack.corpus import load_corpus
    from ragtrack.golden import GoldenItem, load_golden, staleness, with_fingerprint

    kb = tmp_path / "kb"
    kb.mkdir()
    paragraphs = [f"Paragraph {n} about Kenyan coffee. " + "It grows high on volcanic soil. " * 25 for n in range(3)]
    (kb / "origins.md").write_text("# Origins\n\n## Kenya\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
    before = load_corpus(kb)
    first = "origins.md#origins/kenya"
    assert before.passages[first].text.startswith("## Kenya\n\nParagraph 0")
    item = GoldenItem(id="a1", question="Where?", type="A", gt_context_ids=[first], gt_answer="High up.")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(with_fingerprint(item, before).to_line() + "\n", encoding="utf-8")

    inserted = "A new opening paragraph. " + "Kenya exports most of its crop. " * 25
    text = "# Origins\n\n## Kenya\n\n" + "\n\n".join([inserted, *paragraphs]) + "\n"
    (kb / "origins.md").write_text(text, encoding="utf-8")
    after = load_corpus(kb)
    assert after.passages[f"{first}~p2"].text.startswith("Paragraph 0")
    [stale] = staleness(load_golden(golden, after), after)
    assert stale.moved == ((first, f"{first}~p2"),) and f"(its text is now {first}~p2)" in str(stale)


def test_a_section_split_for_the_first_time_and_a_deleted_document_get_advice_that_fits(tmp_path):
    """A paragraph that pushed a section over the passage limit spread its old text over ~p2/~p3: the
    advice "review, then fingerprint" accepted the new intro as GT. A deleted file's items were told
    to point at the passages' "new IDs", which do not exist."""
    from ragtrack.corpus import load_corpus
    from ragtrack.golden import GoldenItem, load_golden, stale_advice, staleness, with_fingerprint

    kb = tmp_path / "kb"
    kb.mkdir()
    body = "The gateway listens on port 8080. " * 20 + "\n\n" + "Its admin page uses port 8443. " * 20
    (kb / "setup.md").write_text(f"# Setup\n\n## Ports\n\n{body}\n", encoding="utf-8")
    (kb / "old.md").write_text("# Old\n\nThe old gateway used port 80.\n", encoding="utf-8")
    before = load_corpus(kb)
    ports, old = "setup.md#setup/ports", next(pid for pid in before.passages if pid.startswith("old.md"))
    items = [
        GoldenItem(id="a1", question="Port?", type="A", gt_context_ids=[ports], gt_answer="8080."),
        GoldenItem(id="a2", question="Old port?", type="A", gt_context_ids=[old], gt_answer="80."),
    ]
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(with_fingerprint(i, before).to_line() + "\n" for i in items), encoding="utf-8")

    intro = "A new introduction about the gateway. " * 16  # the section no longer fits one passage
    (kb / "setup.md").write_text(f"# Setup\n\n## Ports\n\n{intro}\n\n{body}\n", encoding="utf-8")
    (kb / "old.md").unlink()
    after = load_corpus(kb)
    assert f"{ports}~p2" in after.passages
    split, gone = staleness(load_golden(golden, after), after)
    assert f"(its section is now split: {ports}~p2" in str(split)
    assert "(the document old.md is no longer in the corpus)" in str(gone)
    advice = stale_advice([split, gone])
    assert "in a1, a GT passage's section is now split: name the split(s) that hold the answer" in advice
    assert "rewrite or retire a2: their GT documents are no longer in the corpus" in advice
    assert "to accept the new text" not in advice and "new IDs" not in advice


@pytest.mark.parametrize(
    ("sentence", "topic", "language", "question"),
    [
        # a number is asked as how many / how much, up to the end of its clause
        ("维修时更换的部件或整机，享受 90 天保修或原机剩余保修期，以较长者为准。", "维修后的保修", "zh",
         "维修时更换的部件或整机，享受多少天保修或原机剩余保修期？"),
        ("每个账号最多可以创建或加入 10 个家庭，不同家庭的设备彼此独立。", "创建家庭", "zh",
         "每个账号最多可以创建或加入多少个家庭？"),
        ("块太大会混入多个话题，因为一个块里装了好几段。", "切块", "zh", "为什么块太大会混入多个话题？"),
        ("检索增强生成是指先检索再生成的问答方式。", "概念", "zh", "检索增强生成是什么？"),
        ("在家庭管理页面点击创建家庭即可。", "创建家庭", "zh", "创建家庭应该怎么做？"),
        ("这一节没有数字也没有原因。", "其他", "zh", "关于其他，需要知道什么？"),
        ("SDXL 1.0 was released as 2 models, a base and a refiner.", "SDXL", "en",
         "SDXL 1.0 was released as how many models?"),  # 1.0 is a version, 2 counts models
        ("The refiner is a second model that sharpens details.", "SDXL", "en", "What is the refiner?"),
        ("Generation is slow because the model does not fit in VRAM.", "Slow", "en",
         "Why is it that generation is slow?"),
        ("Keep the gateway powered during an update.", "Updating", "en", "What should I know about updating?"),
        ("The default graph expects an SD1.5 checkpoint.", "Graph", "en", "What should I know about graph?"),
        ("Is the gateway online?", "Status", "en", None),  # a question answers nothing
        ("这一节没有数字也没有原因。", "", "zh", None),  # no topic: a file name is not asked about
    ],
)  # fmt: skip
def test_offline_questions_are_the_ones_a_statement_answers(sentence, topic, language, question):
    from ragtrack.authoring.propose import question_for

    assert question_for(sentence, topic, language) == question


def test_the_offline_templates_never_write_a_blank_or_ask_about_parts():
    """init's example set had "——横线处应填什么？" and "how many points does section 'Task Instructions'
    make" items; every template of every type on the Chinese example corpus is now a question."""
    from ragtrack.authoring.propose import ProposeInput, template_candidates
    from ragtrack.corpus import load_corpus
    from tests.conftest import REPO

    passages = tuple(load_corpus(REPO / "examples" / "zh-kb" / "docs").passages.values())
    questions = [c.question for t in "ABCD" for c in template_candidates(ProposeInput(t, 5, passages, "zh"))]
    assert len(questions) >= 12
    assert all(q.endswith("？") for q in questions)
    assert not [q for q in questions if "____" in q or "横线" in q or "小节" in q or "几点" in q]


def test_init_writes_example_questions_and_eval_says_while_they_are_untouched(tmp_path):
    """The first compare ran on init's 4 template items and nothing said so."""
    from ragtrack.api import init_project
    from ragtrack.config import load_config
    from ragtrack.golden import example_caution, load_golden

    shutil.copytree(DATA / "structure", tmp_path / "docs")
    report = init_project(tmp_path / "p", corpus=str(tmp_path / "docs"), language="zh")
    assert report.example_types
    config = load_config(tmp_path / "p")
    golden = load_golden(tmp_path / "p" / "golden.jsonl", config.load_corpus())
    assert all(i.question.endswith(("？", "?")) and "____" not in i.question for i in golden.items)
    assert example_caution(golden) == (
        f"the golden set is still example questions: all {len(golden.items)} items are offline templates (tag "
        "'template', as `ragtrack init` wrote them), so these figures describe the templates, not your users' "
        "questions; write your own (`ragtrack golden propose --doc …`, then review them)"
    )
    # One item of the user's own and the set is theirs.
    lines = (tmp_path / "p" / "golden.jsonl").read_text(encoding="utf-8").splitlines()
    lines[0] = lines[0].replace('"template"', '"mine"')
    (tmp_path / "p" / "golden.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert example_caution(load_golden(tmp_path / "p" / "golden.jsonl", config.load_corpus())) is None
