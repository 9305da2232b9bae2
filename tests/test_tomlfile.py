"""TOML input files: every problem in ragtrack.toml or a spec points at the line to edit."""

import pytest

from ragtrack.config import load_config
from ragtrack.errors import InputError, Problem
from ragtrack.tomlfile import key_line, key_lines, locate

TEXT = """\
# a comment with [brackets] and key = value
top = 1

[eval]
judge = "offline"
timeout_s = 30     # seconds

[profiles."deep.seek"]
model = "m"
limits.max = 3
inline = { a = 1, b = 2 }

[[runs]]
name = "first"
[[runs]]
name = "second"
note = \"\"\"
[not_a_table]
fake = 1
\"\"\"
after = 2
"""


def test_key_lines_follows_tables_dotted_and_quoted_keys_and_arrays_of_tables():
    lines = key_lines(TEXT)
    assert lines[("top",)] == 2
    assert (lines[("eval",)], lines[("eval", "judge")], lines[("eval", "timeout_s")]) == (4, 5, 6)
    assert lines[("profiles",)] == lines[("profiles", "deep.seek")] == 8  # opened by the header
    assert (lines[("profiles", "deep.seek", "limits")], lines[("profiles", "deep.seek", "limits", "max")]) == (10, 10)
    assert (lines[("runs", 0, "name")], lines[("runs", 1)], lines[("runs", 1, "name")]) == (14, 15, 16)
    # A multi-line string's body is text, not keys; the first key after it counts again.
    assert ("not_a_table",) not in lines and ("runs", 1, "fake") not in lines
    assert lines[("runs", 1, "after")] == 21


def test_key_line_falls_back_to_the_nearest_enclosing_key():
    assert key_line(TEXT, ["profiles", "deep.seek", "inline", "b"]) == 11  # inside an inline table
    assert key_line(TEXT, ["profiles", "deep.seek", "base_url"]) == 8  # missing: the table's header
    assert key_line(TEXT, ["gates"]) is None  # nothing of it is written


def test_locate_reads_the_key_path_a_cross_key_check_puts_first():
    [p] = locate([Problem("f.toml", "eval.judge: unknown LLM 'x'")], TEXT)
    assert (p.line, p.field, p.message) == (5, "eval.judge", "unknown LLM 'x'")
    [p] = locate([Problem("f.toml", "a message: with a colon")], TEXT)
    assert (p.line, p.field) == (None, None)


def _config_problems(tmp_path, text):
    (tmp_path / "ragtrack.toml").write_text(text)
    with pytest.raises(InputError) as e:
        load_config(tmp_path)
    return [str(p).removeprefix(f"{tmp_path / 'ragtrack.toml'}") for p in e.value.problems]


def test_config_errors_name_file_line_key_and_the_key_meant(tmp_path):
    text = '[project]\nname = "x"\n\n[eval]\ntimeout_s = "slow"\njudeg = "offline"\n\n[profiles.ds]\nmodel = "m"\n'
    assert _config_problems(tmp_path, text) == [
        ":2: project.name: unknown key (known: cache_dir, corpus, experiment, golden, human_labels, pipelines, "
        "registered_model, tracking_uri)",
        ":5: eval.timeout_s: Input should be a valid number, unable to parse string as a number",
        ":6: eval.judeg: unknown key (did you mean 'judge'?)",
        ":8: profiles.ds.base_url: required key is missing",
    ]
    assert _config_problems(tmp_path, "[eval]\nmax_concurrency = 4\n\n[eval.judge]\n") == [
        ":4: eval.judge: Input should be a valid string"
    ]
    assert _config_problems(tmp_path, '[eval]\n\njudge = "nowhere"\n')[0].startswith(":3: eval.judge: unknown LLM")
    assert _config_problems(tmp_path, 'root = "/elsewhere"\n') == [":1: root: unknown key"]


def test_a_toml_syntax_error_names_its_line(tmp_path):
    assert _config_problems(tmp_path, "[eval]\ntimeout_s = 3\n[eval]\n") == [
        ":3: bad TOML: Cannot declare ('eval',) twice (column 6)"
    ]
