"""Every relative link in the project's Markdown names a file that exists, and every #anchor a
heading of the page it points to (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import PROJECT

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")


def pages() -> list[Path]:
    top = [PROJECT / name for name in ("README.md", "CONTRIBUTING.md", "SECURITY.md",
                                       "CHANGELOG.md")]
    return [p for p in top if p.exists()] + sorted((PROJECT / "docs").glob("**/*.md"))


def prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(text):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(text: str) -> list[str]:
    found = []
    for line in prose_lines(text):
        found += LINK.findall(INLINE_CODE.sub("", line))
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def broken(page: Path) -> list[str]:
    problems = []
    for target in links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{target}: no file {file.relative_to(PROJECT.resolve())}")
        elif anchor and file.suffix == ".md":
            if anchor not in anchors(file.read_text(encoding="utf-8")):
                problems.append(f"{target}: no heading #{anchor} in {file.name}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(PROJECT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert broken(page) == []


def test_the_slug_follows_githubs_rule_for_code_dashes_and_punctuation():
    assert slug("`select_context` — Select Context (writes the ledger)") == (
        "select_context--select-context-writes-the-ledger")
    assert slug("Sending only what is new (`after_id`)") == "sending-only-what-is-new-after_id"
    assert slug("What `install-proxy` changes") == "what-install-proxy-changes"


def test_a_missing_file_and_a_missing_heading_are_both_reported(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.test_doc_links.PROJECT", tmp_path)
    (tmp_path / "b.md").write_text("# Title\n\n## Real one\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text("[x](b.md#real-one) [y](b.md#gone) [z](c.md) `[w](nope.md)`\n"
                    "```\n[v](fenced.md)\n```\n[u](https://example.org/x.md)\n",
                    encoding="utf-8")
    assert broken(page) == ["b.md#gone: no heading #gone in b.md", "c.md: no file c.md"]
