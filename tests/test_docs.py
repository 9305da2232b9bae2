"""The README and the docs site hold together: a short README whose links resolve, an API reference
that names every public function. (The site's own links and anchors are checked by
`mkdocs build --strict`, which `.ci/run` runs as `make docs`.)"""

from __future__ import annotations

import re

import yaml

import ragtrack.api

from .readme import README, ROOT


def test_the_readme_fits_on_a_screen_or_a_few():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_every_relative_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) > 10
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_every_docs_page_is_in_the_site_nav():
    def pages(entries) -> set[str]:
        found: set[str] = set()
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Tolerant)
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages(config["nav"]) == on_disk


def test_the_api_reference_names_every_public_function():
    reference = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s+- (\w+)$", reference, re.MULTILINE))
    assert set(ragtrack.api.__all__) <= listed, sorted(set(ragtrack.api.__all__) - listed)


class _Tolerant(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:…``) that a safe loader refuses: read them as text."""


_Tolerant.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)
