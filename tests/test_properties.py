"""Property-based tests: whatever bytes a user's files hold, loaders answer with a clear error
(naming the file) or a result — never a traceback, never a file written on the way.

Hypothesis generates arbitrary bytes, other encodings, huge lines, deep nesting and
well-formed-but-wrong structures for every loader and for the judge-reply parser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.errors import InputError
from ragtrack.evaluation.judges import parse_verdict
from ragtrack.golden import load_golden
from ragtrack.llm.base import ParseError
from ragtrack.spec import load_spec

from .conftest import DATA, REPO

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400)
encodings = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "gb18030", "latin-1", "cp1252"])
nested = st.integers(min_value=50, max_value=200_000).map(lambda n: "[" * n + "]" * (n % 3))
huge = st.integers(min_value=100_000, max_value=2_000_000).map(lambda n: "x" * n)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)


def file_bytes() -> st.SearchStrategy[bytes]:
    """Raw bytes, text in assorted encodings, one enormous line, or deep nesting."""
    encoded = st.tuples(text, encodings).map(lambda te: te[0].encode(te[1], errors="replace"))
    return st.one_of(st.binary(max_size=2000), encoded, huge.map(str.encode), nested.map(str.encode))


def files_in(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@SETTINGS
@given(content=file_bytes(), suffix=st.sampled_from([".md", ".txt", ".jsonl"]))
def test_corpus_loader(tmp_path_factory, content, suffix):
    folder = tmp_path_factory.mktemp("corpus")
    target = folder / f"doc{suffix}"
    target.write_bytes(content)
    before = files_in(folder)
    try:
        corpus = load_corpus(target if suffix == ".jsonl" else folder)
        assert all(p.text for p in corpus.passages.values())
    except InputError as e:
        assert str(target if suffix == ".jsonl" else folder) in str(e)
    assert files_in(folder) == before


@SETTINGS
@given(
    content=file_bytes()
    | st.lists(json_values, max_size=6).map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode())
)
def test_golden_loader(tmp_path_factory, tiny_corpus, content):
    folder = tmp_path_factory.mktemp("golden")
    path = folder / "golden.jsonl"
    path.write_bytes(content)
    try:
        load_golden(path, tiny_corpus)
    except InputError as e:
        assert str(path) in str(e)
    assert files_in(folder) == {"golden.jsonl"}


def _toml_tables() -> st.SearchStrategy[bytes]:
    """Valid TOML with the right section names and random content: wrong types, unknown keys."""
    scalar = st.integers() | st.booleans() | st.text(max_size=20) | st.floats(allow_nan=False, allow_infinity=False)
    table = st.dictionaries(st.sampled_from(["model", "mode", "top_k", "strategy", "kind", "x", "name"]), scalar)
    sections = st.dictionaries(
        st.sampled_from(
            [
                "version",
                "agent",
                "chunking",
                "embedding",
                "retrieval",
                "generation",
                "llm",
                "prompts",
                "eval",
                "project",
                "prices",
                "gates",
                "profiles",
            ]
        ),
        table,
        max_size=6,
    )
    return sections.map(
        lambda doc: "\n".join(
            f"[{k}]\n" + "\n".join(f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()) for k, v in doc.items()
        ).encode()
    )


@SETTINGS
@given(content=file_bytes() | _toml_tables())
def test_spec_loader(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("pipelines")
    (folder / "bad.toml").write_bytes(content)
    try:
        load_spec("bad", folder, root=folder)
    except InputError as e:
        assert str(folder / "bad.toml") in str(e)
    assert files_in(folder) == {"bad.toml"}


@SETTINGS
@given(content=file_bytes() | _toml_tables())
def test_config_loader(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("project")
    (folder / "ragtrack.toml").write_bytes(content)
    try:
        load_config(folder)
    except InputError as e:
        assert "ragtrack.toml" in str(e)
    assert files_in(folder) == {"ragtrack.toml"}


@settings(max_examples=400, deadline=None)
@given(
    reply=text
    | nested
    | huge
    | json_values.map(json.dumps)
    | st.builds(lambda s, r: json.dumps({"score": s, "reason": r}), json_values, json_values)
)
def test_judge_reply_parser(reply):
    try:
        verdict = parse_verdict(reply)
    except ParseError:
        return
    assert 1 <= verdict.score <= 5 and isinstance(verdict.reason, str)


def test_the_shipped_files_pass_the_same_loaders():
    corpus = load_corpus(REPO / "golden" / "kb")
    assert len(load_golden(REPO / "golden" / "golden.jsonl", corpus)) == 48
    assert tomllib.loads((REPO / "pipelines" / "v5.toml").read_text())["version"]["name"] == "v5"
    assert load_golden(DATA / "golden.jsonl", load_corpus(DATA / "kb"))


@pytest.fixture
def tiny_corpus():
    return load_corpus(DATA / "kb")


# ------------------------------------------------ whole commands, in process (no model is loaded)

FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# A name as the file system holds it: any bytes but the separator and NUL (not UTF-8 ones included).
names = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b".."))


def _project(tmp_path_factory):
    from .conftest import make_project

    return make_project(tmp_path_factory.mktemp("prop") / "project")


def _cli(root, *args):
    from click.testing import CliRunner

    from ragtrack.cli import main

    return CliRunner().invoke(main, ["--root", str(root), *args])


def _clean(result) -> None:
    """Exit 0 or 2 and no traceback: a bug would leave its exception on the result."""
    assert result.exit_code in (0, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.output.count("error:") >= 1


@FEW
@given(line=file_bytes() | json_values.map(lambda v: json.dumps(v).encode()), name=names, content=file_bytes())
def test_golden_lines_corpus_names_and_contents_through_the_commands(tmp_path_factory, line, name, content):
    """A golden line of any bytes, and a corpus file of any name and content: `golden validate` and
    `corpus ls` answer in one error line (exit 2) or accept (exit 0), and write nothing."""
    root = _project(tmp_path_factory)
    golden = root / "golden" / "golden.jsonl"
    golden.write_bytes(golden.read_bytes() + line + b"\n")
    with open(os.fsencode(root / "golden" / "kb") + b"/" + name + b".md", "wb") as f:
        f.write(content)
    before = files_in(root)
    for command in (["golden", "validate"], ["corpus", "ls"]):
        _clean(_cli(root, *command))
    assert files_in(root) == before, "nothing written"


@FEW
@given(
    field=st.sampled_from(["top_k", "chunk_size", "model", "name", "answer"]),  # each key's first line in v1
    value=json_values,
    prompt=file_bytes(),
)
def test_spec_values_and_prompt_texts(tmp_path_factory, field, value, prompt):
    """v1 with one value replaced by anything TOML can hold, and its answer prompt of any bytes: the
    spec loads (then its prompt shows the step's inputs) or is one error naming the spec file."""
    from ragtrack.pipeline.spec import PROMPT_PLACEHOLDERS
    from ragtrack.text import template_problems

    folder = tmp_path_factory.mktemp("spec") / "pipelines"
    shutil.copytree(REPO / "pipelines", folder)
    (folder / "prompts" / "answer_plain.md").write_bytes(prompt)
    text = (folder / "v1.toml").read_text()
    literal = json.dumps(value) if value is not None else '""'  # often TOML too; when not, a TOML error
    text = re.sub(rf"(?m)^({field}\s*=).*$", lambda m: f"{m[1]} {literal}", text, count=1)
    (folder / "v1.toml").write_text(text, encoding="utf-8")
    before = files_in(folder)
    try:
        spec = load_spec("v1", folder, root=folder.parent)
    except InputError as e:
        assert all(p.file == str(folder / "v1.toml") or str(folder) in p.file for p in e.problems), str(e)
    else:
        needs, others = PROMPT_PLACEHOLDERS["answer"]
        assert not template_problems(spec.files["answer"], "answer", needs, (*needs, *others))
    assert files_in(folder) == before


@FEW
@given(reply=text | nested | json_values.map(json.dumps) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_judge_replies_over_http_are_a_verdict_or_an_items_error(reply):
    """Any reply (and the same again to the repair) from a real OpenAI-compatible endpoint: a verdict
    in 1-5 or one recorded error with the raw reply kept, never an exception."""
    from ragtrack.evaluation.judges import JudgeInput, judge_steps
    from ragtrack.llm.fake_server import FakeOpenAIServer

    from .test_llm import client

    with FakeOpenAIServer(reply=lambda r: reply) as server:
        step = judge_steps("en", ("correctness",))["correctness"]
        result = client(server).run(step, JudgeInput("q", "a", "gt", ("c",)))
    if result.ok:
        assert 1 <= result.value.score <= 5
    else:
        assert result.error and result.raw is not None
