"""The tutorials of the documentation site (`docs/tutorials/*.md`) run as tests.

Each tutorial's ```python blocks are run in order, in one fresh namespace, with a temporary
folder as the working directory: what a reader would get by pasting them into one Python
session. The tutorials hold `assert` lines on the numbers they show, so a tutorial whose
numbers drift fails here. One test per tutorial; each is a whole fit (or a few), so `slow`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
TUTORIALS = ("theophylline", "phenobarbital", "network-dynamics", "covariate-network")

# a fenced block that opens with ```python at the start of a line and closes with ```
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return _BLOCK.findall(page.read_text(encoding="utf-8"))


def run_page(page: Path) -> dict:
    namespace: dict = {"__name__": "__main__"}
    for k, block in enumerate(python_blocks(page), start=1):
        code = compile(block, f"{page.name}, python block {k}", "exec")
        exec(code, namespace)  # noqa: S102 (the page's own code, as a reader runs it)
    return namespace


def test_every_tutorial_is_listed_and_has_checks():
    """Fast: each tutorial page exists, is in the site's navigation, and asserts something."""
    nav = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    on_disk = {p.stem for p in (DOCS / "tutorials").glob("*.md")} - {"index"}
    assert on_disk == set(TUTORIALS), on_disk
    for name in TUTORIALS:
        page = DOCS / "tutorials" / f"{name}.md"
        assert f"tutorials/{name}.md" in nav, name
        blocks = python_blocks(page)
        assert blocks, f"{page} has no python blocks"
        assert any(re.search(r"^assert ", b, re.MULTILINE) for b in blocks), page
        for k, block in enumerate(blocks, start=1):
            compile(block, f"{page.name}, python block {k}", "exec")


@pytest.mark.slow
@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_page(DOCS / "tutorials" / f"{name}.md")
