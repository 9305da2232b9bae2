"""What the registry holds: the registered versions with their last evals (``ragtrack versions``), and
what to know about the champion before trusting it.

Apart from :mod:`~ragtrack.api.decisions`, which compares and promotes: listing reads the store and
nothing else, so ``ragtrack versions`` loads neither the evaluation machinery nor the statistics of a
comparison (it starts in little more than MLflow's own import time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragtrack.api.arguments import checked_arguments
from ragtrack.config import load_config
from ragtrack.records import RunSummary
from ragtrack.spec import version_order
from ragtrack.tracking.promotion import unfinished
from ragtrack.tracking.store import Tag, open_store


@dataclass(frozen=True)
class VersionRow:
    """A registered version as ``ragtrack versions`` lists it: its newest model version and spec hash,
    whether it is the champion, and that model version's latest complete eval per golden set (newest
    first). A champion whose spec was edited since has a row of its own beside its name's newest."""

    version: str
    model_version: str
    spec_hash: str
    champion: bool
    last_evals: list[RunSummary]  # newest per golden digest


@checked_arguments
def champion_notes(*, root: str | Path = ".", tracking_uri: str | None = None) -> list[str]:
    """What to know before trusting the registry's champion, a sentence each: a promotion not fully
    recorded (under way, or interrupted: the next ``promote`` finishes it), or a champion no recorded
    decision made. Empty when the champion is as ``promote`` left it."""
    return unfinished(open_store(load_config(root), tracking_uri, existing=True, writing=False))


@checked_arguments
def versions(*, root: str | Path = ".", tracking_uri: str | None = None) -> list[VersionRow]:
    """Every registered version (newest model version each, and the champion's), its last eval per golden digest."""
    config = load_config(root)
    store = open_store(config, tracking_uri, existing=True, writing=False)
    champion = store.champion()
    shown: dict[str, object] = {}  # model version → registry entry
    for mv in store.model_versions():  # newest first
        name = mv.tags.get(Tag.VERSION, "?")
        newest = all(m.tags.get(Tag.VERSION, "?") != name for m in shown.values())
        if newest or (champion and champion[0] == str(mv.version)):
            shown[str(mv.version)] = mv
    evals = store.eval_runs()
    rows = []
    for number, mv in sorted(shown.items(), key=lambda e: (version_order(e[1].tags.get(Tag.VERSION, "?")), -int(e[0]))):
        per_digest: dict[str, RunSummary] = {}
        for run in evals:
            if run.model_version == number:
                per_digest.setdefault(run.golden_digest, run)
        rows.append(
            VersionRow(
                mv.tags.get(Tag.VERSION, "?"),
                number,
                mv.tags.get(Tag.SPEC_HASH, ""),
                bool(champion and champion[0] == number),
                list(per_digest.values()),
            )
        )
    return rows
