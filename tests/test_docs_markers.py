"""Every walkthrough the docs mark as runnable is run by a test; every measured table and shown output
is checked by one.

The markers live in README.md and the pages under docs/ (see tests/readme.py); a test names the
block it runs as a string literal, so finding that literal in the test sources is what "some test
runs it" means here — without it, a page could mark a block runnable that nothing executes.
"""

from __future__ import annotations

import re
from pathlib import Path

from .readme import markers

TESTS = Path(__file__).resolve().parent


def _named_in_tests(function: str) -> set[str]:
    names: set[str] = set()
    for source in TESTS.glob("*.py"):
        names.update(re.findall(rf'\b{function}\("([^"]+)"', source.read_text(encoding="utf-8")))
    return names


def test_every_walkthrough_is_run_by_a_test():
    unrun = set(markers("walkthrough")) - _named_in_tests("walkthrough") - _named_in_tests("stand_in")
    assert not unrun, f"walkthroughs no test runs: {sorted(unrun)}"


def test_every_measured_table_is_checked_by_a_test():
    unchecked = set(markers("figures")) - _named_in_tests("figures")
    assert not unchecked, f"measured tables no test checks: {sorted(unchecked)}"


def test_every_shown_output_is_checked_by_a_test():
    unchecked = set(markers("output")) - _named_in_tests("output")
    assert not unchecked, f"outputs no test compares: {sorted(unchecked)}"


def test_a_test_names_only_blocks_that_exist():
    for kind in ("walkthrough", "figures", "output"):
        assert _named_in_tests(kind) <= set(markers(kind)), kind
