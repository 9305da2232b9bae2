"""Version specs: every shipped spec loads; errors carry the key path; the hash covers prompts."""

import shutil

import pytest

from ragtrack.errors import InputError
from ragtrack.spec import load_spec

from .conftest import REPO


@pytest.fixture
def pipelines(tmp_path):
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    return tmp_path / "pipelines"


def test_shipped_specs_load(pipelines):
    for path in sorted(pipelines.glob("*.toml")):
        spec = load_spec(path.stem, pipelines)
        assert spec.name == path.stem
        assert len(spec.hash) == 16
        params = spec.params()
        assert params["spec_hash"] == spec.hash
        assert "retrieval.top_k" in params and "prompt.answer.hash" in params


def test_hash_covers_prompt_text(pipelines):
    before = load_spec("v1", pipelines).hash
    prompt = pipelines / "prompts" / "answer_plain.md"
    prompt.write_text(prompt.read_text() + "\nBe brief.\n")
    assert load_spec("v1", pipelines).hash != before


def test_llm_override_is_a_different_agent(pipelines):
    spec = load_spec("v1", pipelines)
    other = spec.with_values({"llm": {"model": "openai:gpt-4o-mini"}})
    assert other.spec.llm.model == "openai:gpt-4o-mini" and other.hash != spec.hash
    assert other.spec.llm.temperature == spec.spec.llm.temperature and other.files == spec.files


def test_every_strategy_name_comes_from_its_registry(pipelines):
    from ragtrack.pipeline.spec import CHUNKING

    # The chunking union's tags are the registry's names: one list, not two.
    assert {
        name: model.model_fields["strategy"].annotation.__args__
        for name, model in ((n, CHUNKING.get(n)) for n in CHUNKING)
    } == {n: (n,) for n in CHUNKING}
    for key, bad in (("mode", "retrieval.mode"), ("strategy", "generation.strategy")):
        line = {"mode": 'mode = "dense"', "strategy": 'strategy = "direct"'}[key]
        problems = _write(pipelines, V1_BODY.replace(line, f'{key} = "magic"'))
        assert any(f"{bad}: unknown" in p and "expected one of" in p for p in problems), problems
    problems = _write(pipelines, V1_BODY.replace('model = "none"', 'model = "x"\nkind = "colbert"'))
    assert any("rerank.kind: unknown reranker 'colbert'" in p for p in problems), problems
    problems = _write(pipelines, V1_BODY.replace("[version]", '[agent]\nkind = "teleport"\n\n[version]'))
    assert any("agent.kind: unknown agent kind 'teleport'; expected one of: pipeline" in p for p in problems)


def test_constants_that_change_answers_are_in_the_spec_and_its_hash(pipelines):
    spec = load_spec("v5", pipelines)
    r, tokens = spec.spec.retrieval, spec.spec.llm.max_tokens
    assert (r.child_fetch_factor, r.prf_docs, r.prf_terms) == (4, 3, 5)
    assert (tokens.answer, tokens.outline, tokens.rewrite, tokens.topics) == (512, 200, 200, 120)
    assert spec.params()["retrieval.prf_terms"] == "5"
    changed = spec.with_values({"retrieval": {"prf_terms": 8}})
    assert changed.hash != spec.hash


def _write(pipelines, text):
    (pipelines / "bad.toml").write_text(text)
    with pytest.raises(InputError) as e:
        load_spec("bad", pipelines)
    return [str(p) for p in e.value.problems]


V1_BODY = (REPO / "pipelines" / "v1.toml").read_text().replace('name = "v1"', 'name = "bad"')  # as _write names it


def _line_of(text, needle):
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith(needle))


@pytest.mark.parametrize("value", ["true", '"5"', "5.0"])
def test_a_value_of_the_wrong_type_is_reported_at_its_line_not_coerced(pipelines, value):
    """`top_k = true` ran as top_k 1 (pydantic's lax mode), "5" and 5.0 as 5."""
    text = V1_BODY.replace("top_k = 5", f"top_k = {value}")
    [problem] = _write(pipelines, text)
    assert problem.startswith(f"{pipelines / 'bad.toml'}:{_line_of(text, 'top_k')}: retrieval.top_k: ")
    assert "valid integer" in problem, problem


def test_unknown_key_names_its_path_line_and_the_name_it_resembles(pipelines):
    text = V1_BODY.replace("top_k = 5", "top_k = 5\ntopk = 3")
    problems = _write(pipelines, text)
    assert problems == [
        f"{pipelines / 'bad.toml'}:{_line_of(text, 'topk')}: retrieval.topk: unknown key (did you mean 'top_k'?)"
    ]
    # Inside a discriminated union the names are those of the member the tag chose.
    text = V1_BODY.replace('strategy = "fixed"', 'strategy = "fixed"\nwidth = 3')
    [problem] = _write(pipelines, text)
    assert problem.endswith(
        f":{_line_of(text, 'width')}: chunking.width: unknown key (known: chunk_overlap, chunk_size, strategy)"
    )


def test_a_misspelt_agent_table_is_the_one_problem_reported(pipelines):
    """Read as a pipeline spec, ``[agnet]`` came sixth, after five pipeline tables "missing"."""
    text = '[version]\nname = "bad"\ndescription = "mine"\n\n[agnet]\nkind = "python"\ntarget = "m:answer"\n'
    assert _write(pipelines, text) == [
        f"{pipelines / 'bad.toml'}:5: agnet: unknown table (did you mean 'agent'?); "
        "without [agent] a spec is a ragtrack pipeline"
    ]


def test_bad_value_names_its_path(pipelines):
    problems = _write(pipelines, V1_BODY.replace("chunk_size = 500", "chunk_size = -1"))
    line = _line_of(V1_BODY, "chunk_size")
    assert any(f":{line}: chunking.chunk_size: Input should be greater than 0" in p for p in problems), problems
    problems = _write(pipelines, V1_BODY.replace('mode = "dense"', 'mode = "magic"'))
    assert any("retrieval.mode" in p for p in problems), problems


def test_overlap_must_be_below_size(pipelines):
    problems = _write(pipelines, V1_BODY.replace("chunk_overlap = 50", "chunk_overlap = 600"))
    line = _line_of(V1_BODY, "chunk_overlap")  # it named [chunking]'s line, as "chunking.fixed"
    where = f"{pipelines / 'bad.toml'}:{line}"
    assert problems == [f"{where}: chunking.chunk_overlap: must be smaller than chunk_size (500)"]


def test_a_key_that_needs_another_is_named_at_its_line(pipelines):
    """`multi_query = 2` without a rewrite prompt, or a reranker without first_stage_k: no line at all."""
    text = V1_BODY.replace("top_k = 5", "top_k = 5\nmulti_query = 2")
    assert _write(pipelines, text) == [
        f"{pipelines / 'bad.toml'}:{_line_of(text, 'multi_query')}: retrieval.multi_query: "
        "needs prompts.rewrite (a prompt file under [prompts])"
    ]
    text = V1_BODY.replace('model = "none"', 'model = "BAAI/bge-reranker-base"')
    [problem] = _write(pipelines, text)
    line = _line_of(text, 'model = "BAAI')
    assert problem.startswith(f"{pipelines / 'bad.toml'}:{line}: rerank.model: needs retrieval.first_stage_k")


def test_missing_prompt_file_and_missing_spec(pipelines):
    problems = _write(pipelines, V1_BODY.replace("answer_plain.md", "nowhere.md"))
    line = _line_of(V1_BODY, "answer =")
    assert any(f"bad.toml:{line}: prompts.answer: prompt file not found" in p for p in problems), problems
    with pytest.raises(InputError, match="version spec not found .*available: .*v1"):
        load_spec("v9", pipelines)


def test_a_copied_spec_that_keeps_its_originals_name_is_refused(pipelines):
    """v6.toml copied from v1.toml and still named v1 would be logged, registered and promoted as v1."""
    (pipelines / "v6.toml").write_text((pipelines / "v1.toml").read_text())
    with pytest.raises(InputError) as caught:
        load_spec("v6", pipelines)
    [problem] = caught.value.problems
    line = (pipelines / "v6.toml").read_text().splitlines().index('name = "v1"') + 1
    assert (problem.line, problem.field) == (line, "version.name")
    assert "declares name 'v1', but the file is v6.toml" in problem.message
    text = (pipelines / "v6.toml").read_text()
    (pipelines / "v6.toml").write_text(text.replace('name = "v1"\n', ""))  # no name: the file's
    assert load_spec("v6", pipelines).name == "v6"
    assert load_spec(str(pipelines / "v1.toml"), pipelines).name == "v1"  # a path: the name it declares
    # Named by its path, the copy was logged and registered as v1 (the check ran for bare names only).
    (pipelines / "v6.toml").write_text(text)
    with pytest.raises(InputError, match="declares name 'v1', but the file is v6.toml"):
        load_spec(str(pipelines / "v6.toml"), pipelines)


@pytest.mark.parametrize("target", ["/proc/self/environ", "../../../etc/passwd", "../outside.md"])
def test_prompt_paths_outside_the_project_are_refused(pipelines, target):
    (pipelines.parent / "outside.md").write_text("not a prompt")
    problems = _write(pipelines, V1_BODY.replace("prompts/answer_plain.md", target))
    assert any(
        f"bad.toml:{_line_of(V1_BODY, 'answer =')}: prompts.answer:" in p and "is outside" in p for p in problems
    ), problems


def test_a_symlink_out_of_the_project_is_refused(pipelines, tmp_path):
    secret = tmp_path / "elsewhere" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("OPENAI_API_KEY=sk-should-never-be-read")
    (pipelines / "prompts" / "link.md").symlink_to(secret)
    problems = _write(pipelines, V1_BODY.replace("prompts/answer_plain.md", "prompts/link.md"))
    assert any("prompts.answer:" in p and "is outside" in p for p in problems), problems
    # A file of the project root (one level above pipelines/) is allowed when the root is given.
    (pipelines.parent / "shared.md").write_text("Answer {{question}} from {{contexts}}")
    ok = V1_BODY.replace("prompts/answer_plain.md", "../shared.md").replace('name = "bad"', 'name = "ok"')
    (pipelines / "ok.toml").write_text(ok)
    assert load_spec("ok", pipelines, root=pipelines.parent).files["answer"].startswith("Answer")


def test_a_windows_checkout_is_the_same_agent(pipelines):
    """CRLF line ends (git's autocrlf) and a BOM change neither the hash nor the prompt text."""
    before = load_spec("v1", pipelines)
    for path in [pipelines / "v1.toml", *(pipelines / "prompts").rglob("*.md")]:
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    after = load_spec("v1", pipelines)
    assert after.hash == before.hash and after.files == before.files and "\r" not in after.files["answer"]


def test_each_steps_placeholders_are_what_its_messages_fill():
    """PROMPT_PLACEHOLDERS is what the load-time check holds prompts to: every placeholder it lists for a
    step is filled by that step's messages, and a name it does not list is left as written."""
    from ragtrack.corpus import Passage
    from ragtrack.pipeline.chunking import Chunk
    from ragtrack.pipeline.generate import AnswerInput, AnswerStep, OutlineInput, OutlineStep
    from ragtrack.pipeline.qa_pairs import QAPairsStep
    from ragtrack.pipeline.rewrite import RewriteStep
    from ragtrack.pipeline.spec import PROMPT_PLACEHOLDERS
    from ragtrack.pipeline.topics import TopicsStep

    steps = {
        "answer": (AnswerStep, AnswerInput("q", ("c",), ("o",))),
        "outline": (OutlineStep, OutlineInput("q", (("t",),))),
        "qa_pairs": (QAPairsStep, Passage("p1", "text", "d", 0, 4, title="T")),
        "topics": (TopicsStep, Chunk("c1", "text", "d", ("p1",))),
        "rewrite": (RewriteStep, "q"),
    }
    assert steps.keys() == PROMPT_PLACEHOLDERS.keys()
    for name, (step_class, inp) in steps.items():
        needs, others = PROMPT_PLACEHOLDERS[name]
        template = " ".join(f"{{{{{p}}}}}" for p in (*needs, *others, "unlisted"))
        (message,) = step_class(name, prompt=template).messages(inp)
        assert message["content"].count("{{") == 1 and message["content"].endswith("{{unlisted}}"), name
