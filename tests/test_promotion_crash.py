"""A promote killed between any two of its steps never leaves a champion without its decision.

Each case runs ``ragtrack promote v3`` (v3 beats the champion v1) in a real
process that SIGKILLs itself as one of :data:`ragtrack.tracking.promotion.STEPS`
begins (:mod:`ragtrack.testing.kill`: injected by name, not timed), on a real
SQLite store and registry. Then the registry must read truthfully — the alias
where the steps taken put it, every description either true of the alias or
saying that a promotion is being recorded, ``versions`` saying what is
unfinished — and the next ``ragtrack promote`` must finish the job: v3 champion
with its decision run, tags and descriptions, nothing left RUNNING, no lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.evaluation.promotion import ALIAS
from ragtrack.tracking.promotion import STEPS
from ragtrack.tracking.store import DecisionState, Tag, open_store

from .test_promotion import BASE, log_eval, promote

pytestmark = pytest.mark.slow  # `ragtrack promote` processes killed at every step

BANNER = "A promotion is being recorded"
PROMOTION_RUNS = f"tags.`{Tag.KIND}` = 'promotion' and tags.`{Tag.DRY_RUN}` = 'false'"


def started_killed_at(root, step: str, version: str = "v3") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # the project's own store
    return subprocess.Popen(
        [sys.executable, "-m", "ragtrack.testing.kill", step, "--root", str(root), "promote", version],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def champion_v1_challenger_v3(root):
    """A store where v1 is champion by a recorded decision, v2 and v3 evaluated, v3 better than v1."""
    root.mkdir()
    store = open_store(load_config(root))
    log_eval(store, "v1", BASE)
    assert promote(store, root, "v1").promoted
    _, mv2 = log_eval(store, "v2", [4] * 8)
    _, mv3 = log_eval(store, "v3", [5] * 8)
    return store, mv2, mv3


def ragtrack(root, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def assert_registry_truthful(store, where: str) -> None:
    """Every description a promotion writes is true of where the alias is, or says one is being recorded."""
    number, name = store.champion()
    said = store.registry_descriptions([str(mv.version) for mv in store.model_versions()])
    for key, text in said.items():
        if text.startswith(BANNER):
            continue
        if key == "model":
            assert text.startswith(f"### Champion: {name} (model version [{number}]"), (where, key, text)
        elif key == "experiment":
            assert text.startswith(f"Champion: **{name}**"), (where, key, text)
        elif key == number:
            assert text.startswith(f"{name} is the champion"), (where, key, text)
        else:
            assert not text or f"is not the champion: {name} (model version {number}) is" in text.split("\n")[0], (
                where,
                key,
                text,
            )


def assert_finished(store, mv3: str, where: str) -> None:
    """v3 champion, by a recorded decision the registry and the UI tell; nothing left unfinished or locked."""
    assert store.champion() == (mv3, "v3"), where
    tags = store.client.get_model_version(store.registered_model, mv3).tags
    assert tags[Tag.DECISION].startswith("promoted"), (where, tags)
    run = store.client.get_run(tags[Tag.DECISION_RUN])
    assert run.info.status == "FINISHED" and run.data.tags[Tag.DECISION_STATE] == DecisionState.DONE, where
    assert run.data.params["outcome"] == "promoted" and run.data.params["model_version"] == mv3, where
    for r in store.search_runs([store.decisions_experiment_id], PROMOTION_RUNS):
        state = (r.info.status, r.data.tags.get(Tag.DECISION_STATE))
        assert state in (("FINISHED", DecisionState.DONE), ("FAILED", DecisionState.ABANDONED)), (where, state)
    said = store.registry_descriptions([mv3, "1"])
    assert not any(BANNER in text for text in said.values()), (where, said)
    assert said["model"].startswith(f"### Champion: v3 (model version [{mv3}]"), (where, said["model"])
    assert said[mv3].startswith("v3 is the champion since"), (where, said[mv3])
    assert said["1"].startswith(f"v1 is not the champion: v3 (model version {mv3}) is"), (where, said["1"])
    v1_tags = store.client.get_model_version(store.registered_model, "1").tags
    assert v1_tags[Tag.LAST_CHALLENGE].startswith("v3 promoted"), (where, v1_tags)
    assert not store.client.search_registered_models("name LIKE '%-lock'"), (where, "a lock is left")


def test_a_promote_killed_at_any_step_is_told_truthfully_and_finished_by_the_next(tmp_path):
    cases = {step: champion_v1_challenger_v3(tmp_path / step) for step in STEPS}
    killed = {step: started_killed_at(tmp_path / step, step) for step in STEPS}  # all at once: 2 cores
    for step, process in killed.items():
        out = process.communicate(timeout=300)[0]
        assert process.returncode == -signal.SIGKILL, (step, out)
        store, _, mv3 = cases[step]
        root, at = tmp_path / step, STEPS.index(step)
        moved = at > STEPS.index("alias")
        assert store.champion() == ((mv3, "v3") if moved else ("1", "v1")), step
        assert_registry_truthful(store, step)

        listed = ragtrack(root, "versions")
        assert listed.exit_code == 0, (step, listed.output)
        recorded = STEPS.index("record") < at <= STEPS.index("finish")  # a decision run, not done
        assert ("is not fully recorded: it was interrupted" in listed.output) == recorded, (step, listed.output)
        star = next(line for line in listed.output.splitlines() if "★" in line)
        assert star.split()[0] == ("v3" if moved else "v1"), (step, listed.output)
        if step == "alias":  # pending, the alias still on v1: a dry run and `compare champion` say so too
            dry = ragtrack(root, "promote", "v3", "--dry-run")
            assert dry.exit_code == 0 and "is not fully recorded" in dry.output, dry.output
            compared = ragtrack(root, "compare", "champion", "v3")
            assert compared.exit_code == 0 and "is not fully recorded" in compared.output, compared.output

        again = ragtrack(root, "promote", "v3")
        assert again.exit_code == 0, (step, again.output)
        finished = STEPS.index("commit") < at <= STEPS.index("finish")
        assert ("finished recording an interrupted promotion" in again.output) == finished, (step, again.output)
        assert ("closed an interrupted promotion" in again.output) == (step == "commit"), (step, again.output)
        assert ("already the champion" in again.output) == (at > STEPS.index("commit")), (step, again.output)
        assert_finished(store, mv3, step)
        assert not [n for n in ragtrack(root, "versions").output.splitlines() if "not fully recorded" in n], step


def test_a_promote_killed_again_while_finishing_one_is_finished_by_the_third(tmp_path):
    store, _, mv3 = champion_v1_challenger_v3(tmp_path / "p")
    for step in ("alias", "describe"):  # the second dies inside its finishing of the first
        process = started_killed_at(tmp_path / "p", step)
        assert process.communicate(timeout=300) and process.returncode == -signal.SIGKILL, step
        assert_registry_truthful(store, step)
    again = ragtrack(tmp_path / "p", "promote", "v3")
    assert again.exit_code == 0 and "finished recording an interrupted promotion" in again.output, again.output
    assert_finished(store, mv3, "twice")


def test_a_pending_promotion_whose_alias_was_moved_by_hand_meanwhile_is_abandoned_not_undone(tmp_path):
    store, mv2, mv3 = champion_v1_challenger_v3(tmp_path / "p")
    process = started_killed_at(tmp_path / "p", "tag")  # the alias is on v3, the decision pending
    assert process.communicate(timeout=300) and process.returncode == -signal.SIGKILL
    store.client.set_registered_model_alias(store.registered_model, ALIAS, mv2)  # someone moves it by hand
    again = ragtrack(tmp_path / "p", "promote", "v3")
    assert "abandoned an interrupted promotion of v3" in again.output, again.output
    # v3 is then decided afresh against the champion the registry names now, v2: and beats it.
    assert again.exit_code == 0 and "v3 promoted over v2" in again.output, again.output
    abandoned = [
        r
        for r in store.search_runs([store.decisions_experiment_id], PROMOTION_RUNS)
        if r.data.tags.get(Tag.DECISION_STATE) == DecisionState.ABANDONED
    ]
    assert len(abandoned) == 1 and abandoned[0].info.status == "FAILED"
    assert abandoned[0].data.tags[Tag.NOTE].startswith("**Abandoned**: the champion alias was moved")
    assert store.champion() == (mv3, "v3")
    assert_registry_truthful(store, "abandoned")


def test_a_champion_no_decision_made_is_reported_by_versions_and_promote(tmp_path):
    """The alias set by hand (or by a promote of before decisions were recorded first)."""
    store = open_store(load_config(tmp_path))
    _, mv1 = log_eval(store, "v1", BASE)
    store.set_champion(mv1)
    listed = ragtrack(tmp_path, "versions")
    assert listed.exit_code == 0 and "has no recorded promotion decision" in listed.output, listed.output
    again = ragtrack(tmp_path, "promote", "v1")
    assert again.exit_code == 0 and "has no recorded promotion decision" in again.output, again.output
