"""The project cache: every hit records its use, so pruning drops only what no run has read."""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

from ragtrack.api import cache_entries, evaluate, prune_cache
from ragtrack.caches import CACHE_KINDS, entries, prune
from ragtrack.cli import main
from ragtrack.errors import RagtrackError
from ragtrack.llm.fake_server import FakeOpenAIServer

DAY = 86400


def _age(paths, days):
    then = time.time() - days * DAY
    for path in paths:
        os.utime(path, (then, then))


def test_an_eval_from_cache_marks_what_it_read_and_pruning_drops_only_the_rest(project, monkeypatch):
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        run = {"root": project, "llm": "openai:fake-model", "judge": "openai:fake-model"}
        first = evaluate("v5", **run)
        cached = cache_entries(root=project)
        assert {e.kind for e in cached} == {"index", "vectors", "llm"}

        cache = project / ".ragtrack" / "cache"
        old_index = cache / "index" / "0123456789abcdef0123"  # a corpus edited since: nobody reads it
        old_index.mkdir()
        (old_index / "units.json").write_text("{}")
        old_reply = cache / "llm" / "ab" / ("ab" + "0" * 62 + ".json")
        old_reply.parent.mkdir(exist_ok=True)
        old_reply.write_text("{}")
        (cache / "index" / ".tmp-in-progress").mkdir()  # another process's atomic write: never an entry
        _age([e.path for e in cached] + [old_index, old_reply], days=60)

        calls = len(server.log.requests)
        again = evaluate("v5", **run)
        assert again.setup == "index from cache" and len(server.log.requests) == calls

    # Unused: the planted entries, and the index-time replies (v5's topics), which only a rebuild reads.
    listed = {e.path for e in prune(cache, 30, dry_run=True)}
    index_time = listed - {old_index, old_reply}
    assert len(index_time) == first.accounting["agent"]["topics"]["calls"] > 0
    assert all(p.is_relative_to(cache / "llm") and p.exists() for p in index_time) and old_index.exists()
    assert {e.path for e in prune_cache(30, root=project)} == listed
    assert not old_index.exists() and not old_reply.exists()
    assert {e.path for e in entries(cache)} == {e.path for e in cached} - index_time, "all the eval read is kept"
    assert (cache / "index" / ".tmp-in-progress").is_dir()

    # Pruning everything changes no result: the next eval rebuilds and asks again.
    removed = prune_cache(0, root=project, kinds=["index", "vectors", "llm"])
    assert {e.kind for e in removed} == {"index", "vectors", "llm"} and not entries(cache)
    assert not list((cache / "vectors").glob("*.sqlite-*")), "SQLite's side files go with their database"
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        third = evaluate("v5", **run)
        assert third.setup == "index built" and server.log.requests
    scores = [k for k in first.metrics if not k.startswith("usage/")]  # not timings and token counts
    assert {k: third.metrics[k] for k in scores} == pytest.approx({k: first.metrics[k] for k in scores})


def test_the_cache_commands_list_and_prune_by_kind(project):
    cache = project / ".ragtrack" / "cache"
    index = cache / "index" / "k1"
    index.mkdir(parents=True)
    (index / "units.json").write_text("x" * 2048)
    vectors = cache / "vectors" / "m.sqlite"
    vectors.parent.mkdir()
    vectors.write_bytes(b"y" * 1024)
    vectors.with_name("m.sqlite-wal").write_bytes(b"z" * 1024)
    _age([index, vectors], days=10)

    result = CliRunner().invoke(main, ["--root", str(project), "cache", "info"])
    assert result.exit_code == 0
    [index_row] = [line for line in result.output.splitlines() if "│ index" in line]
    assert "│       1 │ 2.0 KB │" in index_row
    [vectors_row] = [line for line in result.output.splitlines() if "│ vectors" in line]
    assert "│       1 │ 2.0 KB │" in vectors_row  # the database with its write-ahead log

    result = CliRunner().invoke(
        main, ["--root", str(project), "cache", "prune", "--unused-for", "5", "--kind", "index"]
    )
    assert result.exit_code == 0 and result.output.startswith("deleted 1 entry, 2.0 KB")
    assert not index.exists() and vectors.exists()
    result = CliRunner().invoke(main, ["--root", str(project), "cache", "prune", "--unused-for", "1", "--kind", "llms"])
    assert result.exit_code == 2 and "'llms' is not one of 'index', 'vectors', 'llm'" in result.output
    assert "|".join(CACHE_KINDS.names()) in CliRunner().invoke(main, ["cache", "prune", "--help"]).output
    with pytest.raises(RagtrackError):
        prune_cache(-1, root=project)
