"""The command line as a user meets it: help, errors with file and line, the eval table."""

import re
from pathlib import Path

import pytest
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
    import gc

    result = run("--root", str(project), "eval", "--version", "v1", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert gc.isenabled()  # the set-up ran with the collector paused; the caller has it back
    assert "context_recall" in result.output and "correctness" in result.output and "type A" in result.output
    assert "run " in result.output and "ragtrack ui" in result.output
    assert "--limit 3 takes the first 3 items in file order: no item of type C, D" in result.output
    database = project.resolve() / "mlruns" / "mlflow.db"
    assert f"… a new tracking store: {database}" in result.output  # a mistyped --tracking-uri shows here
    again = run("--root", str(project), "eval", "v1", "--limit", "3")  # VERSION as an argument: the same eval
    assert again.exit_code == 0 and "a new tracking store" not in again.output
    assert re.search(r"run \w+", again.output).group() != re.search(r"run \w+", result.output).group()


def test_eval_takes_its_version_once():
    assert "which version? e.g. ragtrack eval v5" in run("eval").output
    clash = run("eval", "v1", "--version", "v5")
    assert clash.exit_code == 2 and "VERSION 'v1' and --version 'v5' disagree" in clash.output


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


def test_a_warning_at_line_100_prints_the_line_number_not_an_emoji(project):
    doc = project / "golden" / "kb" / "long.md"
    filler = [f"Line {n} of the introduction." for n in range(2, 100)]
    body = "\n\n".join("A paragraph about tiles and memory, long enough to matter. " * 4 for _ in range(12))
    doc.write_text("\n".join(["# Long document", *filler, "## A long section", body]) + "\n")
    result = run("--root", str(project), "golden", "validate")
    assert "long.md:100: section 'Long document > A long section'" in result.output, result.output
    assert "💯" not in result.output


def test_unknown_version_lists_the_available_ones(project):
    import gc

    gc.unfreeze()  # nothing frozen before: the caller did not freeze anything of its own
    result = run("--root", str(project), "eval", "--version", "v42")
    assert result.exit_code == 2 and "available: v1, v2, v3, v4, v5" in result.output
    assert gc.isenabled()  # a set-up that fails hands the collector back too
    assert gc.get_freeze_count() == 0  # and, in-process, what the command froze is collectable again


def test_commands_find_the_project_from_a_subfolder_and_refuse_outside_one(project, tmp_path, monkeypatch):
    monkeypatch.chdir(project / "golden" / "kb")
    result = run("golden", "validate")  # as git finds its repository: the nearest folder with pipelines/
    assert result.exit_code == 0 and "ok 5 items" in result.output, result.output
    outside = tmp_path / "not-a-project"
    outside.mkdir()
    monkeypatch.chdir(outside)
    result = CliRunner().invoke(main, ["versions"])
    assert result.exit_code == 2 and "not in a ragtrack project" in result.output
    assert list(outside.iterdir()) == [], "a command that only reads a store never creates one"
    for command in ("versions", "compare", "promote", "ui"):  # help is for reading anywhere
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "Usage: " in result.output, (command, result.output)
    # The Python API neither: in a project not evaluated yet, or at a root that does not exist.
    from ragtrack.api import compare, promote, versions
    from ragtrack.errors import StoreError

    for call in (lambda r: versions(root=r), lambda r: compare("v1", "v2", root=r), lambda r: promote("v1", root=r)):
        for root in (project, tmp_path / "nowhere"):
            with pytest.raises(StoreError, match="nothing has been evaluated in .* yet"):
                call(root)
    assert not (project / "mlruns").exists() and not (tmp_path / "nowhere").exists()
    # Arguments of the wrong type are named (were: TypeError from os.fspath, AttributeError on list.replace).
    from pydantic import ValidationError

    from ragtrack.api import evaluate

    for call, wrong in (
        (lambda: evaluate(1, root=project), "input_value=1"),
        (lambda: promote(["v1"], root=project), "input_value=['v1']"),
        (lambda: promote("v1", root=project, margin="a tenth"), "margin"),
        (lambda: compare("v1", 2, root=project), "input_value=2"),
    ):
        with pytest.raises(ValidationError, match=re.escape(wrong)):
            call()
    assert not (project / "mlruns").exists()


def test_golden_validate_says_not_ready_when_eval_would_refuse(project):
    import json

    golden = project / "golden" / "golden.jsonl"
    rows = [json.loads(line) for line in golden.read_text().splitlines()]
    rows[0]["gt_answer"] = ""
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run("--root", str(project), "golden", "validate")
    assert result.exit_code == 1 and "not ready 5 items" in result.output and "ok 5 items" not in result.output
    assert "1 item(s) have no GT answer yet (run `ragtrack golden answer`):" in result.output
    assert f"{golden}:1: {rows[0]['id']}: gt_answer is empty" in result.output
    # GT that contradicts its type is a warning at its line (validate said ok; only `audit` looked).
    d1 = next(n for n, r in enumerate(rows, start=1) if r["id"] == "d1")
    assert f"{golden}:{d1}: d1: type D names at least two GT passages" in result.output


def test_a_paused_collector_resumes_once_and_freezes_what_set_up_made():
    import gc

    from ragtrack.cli import cyclic_gc_paused

    assert gc.isenabled()
    with cyclic_gc_paused() as resume:
        assert not gc.isenabled()
        kept = [[n] for n in range(1000)]  # long-lived objects made during set-up
        resume()
        assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
        gc.disable()  # whoever turns it off after resuming is not overruled by the block's end
    assert not gc.isenabled()
    gc.enable()
    gc.unfreeze()


def test_golden_stats(project):
    result = run("--root", str(project), "golden", "stats")
    assert result.exit_code == 0 and "by_type" in result.output and "A: 2" in result.output


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A project where v1 and v3 have been evaluated through the CLI."""
    from .conftest import make_project

    root = make_project(tmp_path_factory.mktemp("cli") / "project")
    for version in ("v1", "v3"):
        result = run("--root", str(root), "eval", "--version", version)
        assert result.exit_code == 0, result.output
    return root


def test_eval_prints_the_diagnosis_of_its_own_numbers(evaluated):
    result = run("--root", str(evaluated), "eval", "--version", "v1")
    assert "Diagnosis" in result.output and "low context precision" in result.output
    assert "worst items:" in result.output and "index from cache" in result.output


def test_compare_prints_paired_rows_per_type_and_logs_a_run(evaluated):
    import gc

    result = run("--root", str(evaluated), "compare", "v1", "v3")
    assert result.exit_code == 0, result.output
    assert gc.isenabled()  # compare pauses the cyclic collector and hands it back to an in-process caller
    out = result.output
    assert "v1 vs v3" in out and "95% CI" in out and "context_recall" in out and "correctness" in out
    assert all(f"│ {t} " in out for t in "ABCD"), out  # one row per question type
    assert "comparison run" in out
    itself = run("--root", str(evaluated), "compare", "v1", "v1")  # was: a run against itself, logged
    assert itself.exit_code == 2 and "compare needs two versions; both are v1" in itself.output


def test_compare_names_its_clusters_primary_tests_holm_column_and_mde_and_golden_power_gives_items_needed(
    evaluated, tmp_path
):
    import json

    out_file = tmp_path / "compare.json"
    result = run("--root", str(evaluated), "compare", "v1", "v3", "--json", str(out_file))
    out = result.output
    assert result.exit_code == 0, out
    assert "correctness ◆" in out and "groundedness ◆" in out and "p Holm" in out
    assert "clustered by GT documents shared (any in common: one cluster): " in out and " clusters of 5 items" in out
    # five items: at most five clusters, so no test at 5 % is possible and no MDE is printed, with why
    assert "minimum detectable Δ at 80% power (t, α 0.05, this set's 5 items in " in out
    assert "too few for any test at 5% (a sign-flip test needs 6)" in out or "no variation in 5 items" in out
    assert max(len(line) for line in out.splitlines() if line[:1] in "┏┃┡│├└") <= 120  # the table: 120 at most
    data = json.loads(out_file.read_text())
    row = next(r for r in data["rows"] if r["metric"] == "correctness" and r["scope"] == "all")
    assert row["primary"] and row["clusters"] >= 1 and row["largest_cluster"] >= 1
    assert data["clustering"]["by"] == "document"
    assert {p["metric"] for p in data["power"]} == {"correctness", "groundedness"}
    assert all(p["mde"] is None and p["reason"] for p in data["power"])
    assert all(r["p_holm"] >= r["p"] for r in data["rows"])  # every row in the one Holm family
    wide = run("--root", str(evaluated), "compare", "v1", "v3", "--wide")
    assert wide.exit_code == 0 and "clusters" in wide.output.splitlines()[2] and " SE " in wide.output

    power = run("--root", str(evaluated), "golden", "power", "v1", "v3", "--delta", "0.5", "--cluster", "item")
    assert power.exit_code == 0, power.output
    assert "clustered by each item alone: 5 clusters of 5 items" in power.output
    bad = run("--root", str(evaluated), "golden", "power", "v1", "v3", "--cluster", "page")
    assert bad.exit_code == 2 and "unknown clustering 'page'; expected one of: document, item, type, tag" in bad.output


def test_comparing_the_same_two_runs_again_returns_the_first_comparison_run(evaluated):
    from ragtrack.api import compare
    from ragtrack.config import load_config
    from ragtrack.tracking.store import Tag, open_store

    first, again = compare("v1", "v3", root=evaluated), compare("v1", "v3", root=evaluated)
    assert first.run_id and again.run_id == first.run_id
    assert again.rows == first.rows  # seeded statistics: the reused run holds what would be logged again
    store = open_store(load_config(evaluated))
    query = f"tags.`{Tag.KIND}` = 'compare' and params.b_run = '{first.b.run_id}'"
    assert len(list(store.search_runs([store.decisions_experiment_id], query))) == 1
    # v1 returns 5 contexts, v3 3: said beside the table and on the comparison run's page
    cutoff = "nDCG and all_hops_at_k are cut at each version's own k (5 vs 3)"
    assert any(w.startswith(cutoff) for w in first.warnings), first.warnings
    assert cutoff in store.client.get_run(first.run_id).data.tags["mlflow.note.content"]
    swapped = compare("v3", "v1", root=evaluated)  # another pair: its own run
    assert swapped.run_id != first.run_id


def test_eval_compare_and_promote_append_their_run_descriptions_as_markdown_for_ci(evaluated, tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("# eval job\n", encoding="utf-8")
    assert run("--root", str(evaluated), "eval", "--version", "v3", "--markdown", str(summary)).exit_code == 0
    assert run("--root", str(evaluated), "compare", "v1", "v3", "--markdown", str(summary)).exit_code == 0
    decided = run("--root", str(evaluated), "promote", "v3", "--dry-run", "--markdown", str(summary))
    assert decided.exit_code in (0, 1), decided.output
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# eval job\n")  # appended, as $GITHUB_STEP_SUMMARY wants
    assert text.index("correctness") < text.index("**v1 → v3**")  # the eval's own description came first
    assert "**v1 → v3**" in text and "95% t interval over clusters" in text
    assert "**v3 would be promoted**" in text or "**v3 refused**" in text
    assert "(dry run: the alias did not move)" in text
    assert "](#/runs/" in text  # a local store has no address: the UI's own routes, as `ragtrack ui` serves them


def test_versions_lists_each_version_with_its_last_eval(evaluated):
    result = run("--root", str(evaluated), "versions")
    assert result.exit_code == 0, result.output
    assert "v1" in result.output and "v3" in result.output and "heuristic@" in result.output


def test_promote_exit_status_is_0_when_promoted_and_1_when_refused(evaluated):
    first = run("--root", str(evaluated), "promote", "v1")
    assert first.exit_code == 0 and "v1 promoted" in first.output, first.output
    again = run("--root", str(evaluated), "promote", "v1")  # a CI gate re-run on an unchanged champion: a pass
    assert again.exit_code == 0 and "v1 is already the champion (model version 1)" in again.output, again.output
    from ragtrack.config import load_config
    from ragtrack.tracking.store import Tag, open_store

    store = open_store(load_config(evaluated))
    tags = store.client.get_model_version(store.registered_model, "1").tags
    assert tags[Tag.DECISION] == "promoted", "the decision that made it champion stays"
    decided = store.client.get_run(tags[Tag.DECISION_RUN]).data  # its reasons are on the decision run
    assert decided.params["summary"].startswith("v1 promoted: no champion yet") and decided.tags[Tag.VERSION] == "v1"
    assert "★" in run("--root", str(evaluated), "versions").output


def test_json_gives_a_ci_script_the_run_the_figures_and_the_verdict(evaluated, tmp_path):
    """A script had to scrape "run <id> · model version N" from the tables, and an eval with failed
    items said so in text only."""
    import json

    out = tmp_path / "eval.json"
    result = run("--root", str(evaluated), "eval", "--version", "v3", "--json", str(out))
    got = json.loads(out.read_text(encoding="utf-8"))
    assert result.exit_code == got["exit_status"] == 0
    assert got["command"] == "eval" and got["complete"] and got["items"] == 5 and got["unanswered"] == 0
    assert f"run {got['run_id']} · model version {got['model_version']}" in result.output
    assert 1 <= got["metrics"]["correctness"] <= 5 and got["errors"] == []

    result = run("--root", str(evaluated), "compare", "v1", "v3", "--json", "-")  # stdout: the JSON alone
    compared = json.loads(result.stdout)
    rows = {(r["metric"], r["scope"]): r for r in compared["rows"]}
    assert compared["b"]["run_id"] == got["run_id"] and rows["correctness", "all"]["n"] == 5
    assert rows["correctness", "all"]["b"] == pytest.approx(got["metrics"]["correctness"])

    result = run("--root", str(evaluated), "promote", "v3", "--dry-run", "--json", "-")
    decided = json.loads(result.stdout)
    assert decided["exit_status"] == result.exit_code and decided["outcome"] in ("promoted", "refused", "unchanged")
    assert decided["run_id"] == got["run_id"] and decided["reasons"]

    # An error still writes the file: a script read what an earlier step had left there ("promoted").
    out.write_text('{"outcome": "promoted", "exit_status": 0}', encoding="utf-8")
    result = CliRunner().invoke(main, ["--root", str(evaluated), "promote", "v9", "--json", str(out)])
    failed = json.loads(out.read_text(encoding="utf-8"))
    assert result.exit_code == failed["exit_status"] == 2 and failed["error"].startswith("no version 'v9'")
    result = CliRunner().invoke(
        main, ["--root", str(evaluated), "compare", "v1", "v3", "--json", "-", "--markdown", "-"]
    )
    assert result.exit_code == 2 and "only one of --markdown - and --json - can print to stdout" in result.output


def test_user_errors_are_one_line_without_traceback(project):
    (project / "ragtrack.toml").write_text("[gates]\ncorectness = 0.8\n")
    result = CliRunner().invoke(main, ["--root", str(project), "promote", "v1"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "gates: unknown metric 'corectness'" in result.output
    # A gate on the per-item name of mrr read "missing" on every run and refused every promotion.
    from ragtrack.config import load_config

    (project / "ragtrack.toml").write_text("[gates]\nreciprocal_rank = 0.1\n")
    assert load_config(project).gates == {"mrr": 0.1}


def test_versions_table_keeps_its_markers_at_80_columns():
    from rich.console import Console

    from ragtrack.api.listing import VersionRow
    from ragtrack.records import RunSummary
    from ragtrack.report import versions_table

    def runs(version, substituted, judge="heuristic@h3", judged=48.0, cautions=()):
        metrics = {"context_recall": 0.658, "mrr": 0.648, "correctness": 2.4, "groundedness": 5.0, "counts/items": 48.0}
        metrics["counts/judged/correctness"] = judged
        return [
            RunSummary(
                f"0123456789{version}",
                version,
                "b3659caab4e0ee6f",
                judge,
                "0.5",
                substituted,
                "1",
                metrics,
                cautions=cautions,
            )
        ]

    rows = [
        VersionRow("v1", "1", "abcdef1234567890", True, runs("v1", False)),
        VersionRow("v5", "5", "abcdef1234567890", False, runs("v5", True, "openai:a-long-model-name|prompts=x")),
        # A run whose correctness mean covers 35 of 48 items, cut by --limit: it read like the others.
        VersionRow("v6", "6", "abcdef1234567890", False, runs("v6", False, judged=35.0, cautions=("--limit",))),
    ]
    console = Console(width=80, record=True)
    console.print(versions_table(rows))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "v1 ★" in lines[1] and "0.658" in lines[1] and "heuristic@h3" in lines[1]
    assert "0123456*" in lines[2] and "5.00" in lines[2]
    [v6] = [line for line in lines if line.startswith("v6")]  # the long judge above wraps onto a line
    assert "0123456~!" in v6 and "2.40" in v6


def test_progress_lines_outside_a_terminal_have_a_rate_and_an_eta():
    from ragtrack.cli.evaluate import ItemProgress

    p = ItemProgress("eval v1")
    p.total, p.done, p.resumed = 48, 12, 0
    assert p.line(30.0) == "12/48 items, 0.40 items/s, 30 s elapsed, ETA 90 s"
    p.done = 48
    assert p.line(600.0).endswith("10.0 min elapsed, done")


def test_the_eta_counts_from_the_first_item_not_the_start_up():
    """A Spark eval's first line said ETA 111 min: its session's start-up was counted as item time."""
    from ragtrack.cli.evaluate import ItemProgress

    p = ItemProgress("eval v1")
    p.total, p.done, p.resumed, p.started = 48, 0, 0, 0.0
    p.first_at, p.first_done, p.done = 120.0, 1, 1  # two minutes of start-up, then the first item
    assert p.line(120.0, 120.0) == "1/48 items, 0.00 items/s, 2.0 min elapsed, ETA after the next item"
    p.done = 11  # ten more, 2 s each
    assert p.line(140.0, 140.0) == "11/48 items, 0.50 items/s, 2.3 min elapsed, ETA 74 s"


def test_tables_piped_to_a_file_print_whole_never_cut_to_80_columns(evaluated):
    """A CI log or `| tee`: no terminal, so no width to fit — every cell in full."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "MLFLOW_TRACKING_URI")}
    out = subprocess.run(
        [sys.executable, "-m", "ragtrack.cli", "--root", str(evaluated), "compare", "v1", "v3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) > 80, out.stdout  # wider than a terminal's default
    assert "…" not in out.stdout, out.stdout


def test_user_text_that_looks_like_rich_markup_is_printed_as_written(project):
    """Headings, passages and questions are data: ``[/v1/chat]`` or ``[bold]`` must print verbatim, not crash."""
    doc = project / "golden" / "kb" / "api.md"
    doc.write_text(
        "# Calling [/v1/chat] from [bold]scripts\n\n"
        "Send a POST to [/v1/chat] with the [red]model[/red] field set; the reply carries [/b] choices.\n\n"
        "## Retries\n\nRetry on 429 after the delay in the Retry-After header.\n"
    )
    golden = project / "golden" / "golden.jsonl"
    golden.write_text(
        golden.read_text() + '{"id": "z1", "question": "Where do I send [/b] a chat call?", "type": "A", '
        '"gt_context_ids": ["api.md#calling-v1-chat-from-bold-scripts/missing"], "gt_answer": "x"}\n'
    )
    listing = run("--root", str(project), "corpus", "ls")
    assert listing.exit_code == 0, listing.output
    assert "Calling [/v1/chat] from [bold]scripts" in listing.output.replace("\n", "")
    found = run("--root", str(project), "corpus", "search", "--mode", "bm25", "POST to [/v1/chat]")
    assert found.exit_code == 0, found.output
    assert "[/v1/chat]" in found.output and "[red]model[/red]" in found.output.replace("\n", "")
    checked = run("--root", str(project), "golden", "validate")
    assert "MarkupError" not in checked.output and "Traceback" not in checked.output
    assert "calling-v1-chat-from-bold-scripts/missing" in checked.output.replace("\n", ""), checked.output


def test_registering_a_version_prints_nothing_of_mlflows_own(project):
    """MLflow's fluent registration prints 'Registered model … already exists' and 'Created version …' to stderr."""
    import os
    import subprocess
    import sys

    from ragtrack.config import load_config
    from ragtrack.tracking.store import Tag, open_store

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    for version in ("v1", "v2"):  # the second registers into an existing registered model
        command = ["eval", "--version", version, "--limit", "2"]
        done = subprocess.run(
            [sys.executable, "-m", "ragtrack.cli", "--root", str(project), *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"model version {version[1]}" in done.stdout
        for chatter in ("Registered model", "Created version", "Successfully registered"):
            assert chatter not in done.stdout + done.stderr
    store = open_store(load_config(project))
    v2 = store.model_versions("v2")[0]
    assert v2.source.startswith("models:/") and v2.tags[Tag.VERSION] == "v2"
    logged = store.client.get_logged_model(v2.source.removeprefix("models:/"))
    assert logged.tags[Tag.MODEL_VERSIONS] == '[{"name": "rag-agent", "version": 2}]'  # its page links the version


def test_markdown_on_stdout_is_the_markdown_alone(project, tmp_path):
    """``--markdown - > summary.md``: progress, tables and warnings go to stderr. The store is the
    user's MLFLOW_TRACKING_URI, as in CI: the Markdown must be read from that store too."""
    import os
    import subprocess
    import sys

    store = tmp_path / "team" / "mlflow.db"
    done = subprocess.run(
        [sys.executable, "-m", "ragtrack.cli", "--root", str(project), "eval", "--version", "v1", "--markdown", "-"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store}"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("**v1**: correctness (1–5)") and "┃" not in done.stdout and "…" not in done.stdout
    assert "… loading corpus and golden set" in done.stderr and "┃ metric" in done.stderr
    assert store.is_file() and not (project / "mlruns").exists()


def test_a_quick_limited_run_does_not_hide_the_full_set_comparison(project):
    from ragtrack.api import compare, evaluate

    full_v1, full_v3 = evaluate("v1", root=project), evaluate("v3", root=project)
    quick = evaluate("v3", root=project, limit=2)  # now v3's latest run, on a set v1 was never run on
    report = compare("v1", "v3", root=project, log=False)
    assert (report.a.run_id, report.b.run_id) == (full_v1.run_id, full_v3.run_id)
    assert report.warnings[0] == (
        f"v1 has no eval on the golden set of v3's latest run ({quick.params['golden_digest']}, 2 items): "
        f"compared on the latest set both have ({full_v3.params['golden_digest']}, 5 items)"
    )
    result = run("--root", str(project), "compare", "v1", "v3")
    assert result.exit_code == 0 and "v1 has no eval on the golden set of v3's latest run" in result.output


def test_a_relative_sqlite_store_in_ragtrack_toml_is_the_projects_wherever_the_command_runs(project, monkeypatch):
    """It was resolved from the current folder: from golden/ `versions` found no store, `eval` made a second."""
    from ragtrack.config import load_config
    from ragtrack.tracking.store import resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (project / "ragtrack.toml").write_text('[project]\ntracking_uri = "sqlite:///store/mlflow.db"\n')
    monkeypatch.chdir(project / "golden")
    expected = f"sqlite:///{(project / 'store' / 'mlflow.db').resolve()}"
    assert resolve_tracking_uri(load_config(project)) == expected


def test_ui_against_a_tracking_server_names_its_ui_instead_of_crashing_mlflow_ui(project):
    """`mlflow ui --backend-store-uri http://…` fails on the registry URI; the server serves its own UI."""
    result = run("--root", str(project), "ui", "--tracking-uri", "http://user:pw@127.0.0.1:9")
    assert result.exit_code == 2 and "open its UI at http://127.0.0.1:9" in result.output
    assert "pw" not in result.output


@pytest.mark.slow  # a server as a process (docs/contributing.md: what is marked slow)
def test_ragtrack_ui_stops_the_whole_server_on_sigterm(project):
    """`ragtrack ui` became `mlflow ui`, whose uvicorn workers outlived a SIGTERM, holding the port."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    (project / "mlruns").mkdir()
    ui = subprocess.Popen(
        [sys.executable, "-m", "ragtrack.cli", "--root", str(project), "ui", "--port", port],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    # The address is printed once it answers (printed at once, it refused connections for half a minute).
    line = "-"
    while line and not line.startswith("MLflow UI on"):  # mlflow's own lines come first
        line = ui.stdout.readline()
    assert line.startswith(f"MLflow UI on http://127.0.0.1:{port}"), "the UI did not come up"
    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)

    def serving() -> list[str]:  # processes whose command line holds our port (procps may be absent)
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--port" in args and port.encode() in args and cmdline.parent.name != str(ui.pid):
                found.append(cmdline.parent.name)
        return found

    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline and ui.poll() is None, "the UI did not come up"
            time.sleep(0.5)
    assert len(serving()) >= 2  # mlflow ui and its uvicorn
    ui.send_signal(signal.SIGTERM)
    assert ui.wait(timeout=30) == 143
    deadline = time.monotonic() + 15
    while serving() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not serving(), "server processes outlived `ragtrack ui`"


def test_the_users_mlflow_tracking_uri_still_counts_after_a_call_with_another_store(project, tmp_path, monkeypatch):
    """MLflow exports the URI it is pointed at; a call with ``tracking_uri=`` replaced the user's
    MLFLOW_TRACKING_URI, and the next call without one silently used the project's default store."""
    from ragtrack.config import load_config
    from ragtrack.tracking import store as store_module
    from ragtrack.tracking.store import open_store, resolve_tracking_uri

    # What the process exported and what the user had set are process state: this test's must not
    # outlive it (monkeypatch restores the variable, so it restores what explains it too).
    monkeypatch.setattr(store_module, "_exported", store_module._exported)
    monkeypatch.setattr(store_module, "_users", store_module._users)
    users, other = f"sqlite:///{tmp_path / 'team.db'}", f"sqlite:///{tmp_path / 'scratch.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", users)
    config = load_config(project)
    open_store(config, other)
    assert resolve_tracking_uri(config) == users
    open_store(config)
    assert resolve_tracking_uri(config) == users and resolve_tracking_uri(config, other) == other
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert resolve_tracking_uri(config).endswith(f"{project.name}/mlruns/mlflow.db")


def test_a_new_experiment_keeps_its_artifacts_in_the_project_not_the_current_folder():
    from ragtrack.tracking.store import artifact_root

    root = Path("/srv/project")
    assert artifact_root("sqlite:////data/store/mlflow.db", root) == "file:///data/store/artifacts"
    # A database reached directly: MLflow's default was ./mlruns of the folder the first command ran in.
    assert artifact_root("postgresql+psycopg2://u:p@db:5432/mlflow", root) == "file:///srv/project/mlruns/artifacts"
    assert artifact_root("mysql://u:p@db/mlflow", root) == "file:///srv/project/mlruns/artifacts"
    assert artifact_root("http://mlflow.internal:5000", root) is None  # the server decides
