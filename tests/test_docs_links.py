"""Every relative link in README.md, CONTRIBUTING.md and docs/ names a file that exists, and its `#anchor` a heading.

Pages move (docs/benchmarks.md keeps results, docs/experiments/ the record behind them); a link that
silently lands on the top of the wrong page, or nowhere, is what this catches. Anchors are GitHub's:
the heading lowercased, punctuation other than `-` and `_` dropped, spaces as `-`, `-1`, `-2` for repeats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "configs").rglob("*.md")),
]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of `page`."""
    seen: dict[str, int] = {}
    found = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        if not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of `page`, outside code blocks."""
    targets = _LINK.findall(_FENCE.sub("", page.read_text()))
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchor_rule_matches_github() -> None:
    page = ROOT / "docs" / "benchmarks.md"
    assert "pytorch-metric-learnings-losses-against-the-plain-scripts-same-loss" in anchors(
        ROOT / "docs" / "experiments" / "glyphs.md"
    )
    assert "speed-the-machine-and-the-method" in anchors(page)


_CITATION = re.compile(r"(docs/[\w/.-]+\.md)(?:[,:]?\s*#?\s*\"([^\"]+)\")?")
SOURCES = sorted(
    path
    for folder in ("retrieval", "configs", "tools", "examples")
    for path in (ROOT / folder).rglob("*")
    if path.suffix in {".py", ".yaml", ".yml"}
)


def headings(page: Path) -> list[str]:
    """The heading texts of `page`, outside code blocks."""
    return [line.lstrip("#").strip() for line in _FENCE.sub("", page.read_text()).splitlines() if line.startswith("#")]


def test_code_citations_of_docs_resolve() -> None:
    """A comment citing `docs/PAGE.md, "Section"` names a page that exists and a heading it holds (by prefix).

    Results move between docs/benchmarks.md and docs/experiments/; a comment pointing at a section that
    left its page sends the reader nowhere.
    """
    broken = []
    for source in SOURCES:
        for match in _CITATION.finditer(source.read_text(errors="replace")):
            page, section = ROOT / match.group(1), match.group(2)
            where = f"{source.relative_to(ROOT)}: {match.group(0)}"
            if not page.exists():
                broken.append(f"{where}: no such page")
            elif section and not any(h.startswith(section) for h in headings(page)):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)
