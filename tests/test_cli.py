"""The command line as a user meets it: help, errors with file and line, the eval table."""

from click.testing import CliRunner

from ragtrack.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_help_teaches_the_workflow():
    result = run("--help")
    assert result.exit_code == 0
    for command in ("eval", "compare", "promote", "versions", "golden", "ui"):
        assert command in result.output
    assert "--judge" in run("eval", "--help").output


def test_eval_prints_the_metric_table_and_run(project):
    result = run("--root", str(project), "eval", "--version", "v1", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert "context_recall" in result.output and "correctness" in result.output and "type A" in result.output
    assert "run " in result.output and "ragtrack ui" in result.output


def test_bad_golden_line_is_reported_with_file_and_line(project):
    golden = project / "golden" / "golden.jsonl"
    golden.write_text(
        golden.read_text() + '{"id": "z9", "question": "", "type": "Q", "gt_context_ids": [], "gt_answer": "x"}\n'
    )
    result = run("--root", str(project), "golden", "validate")
    assert result.exit_code == 2
    assert f"{golden}:6: question: must not be empty" in result.output
    assert f"{golden}:6: type: unknown value 'Q'" in result.output
    assert "Traceback" not in result.output


def test_unknown_version_lists_the_available_ones(project):
    result = run("--root", str(project), "eval", "--version", "v42")
    assert result.exit_code == 2 and "available: v1, v2, v3, v4, v5" in result.output


def test_golden_stats(project):
    result = run("--root", str(project), "golden", "stats")
    assert result.exit_code == 0 and "by_type" in result.output and "A: 2" in result.output
