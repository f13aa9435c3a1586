"""The messages' links to the documentation site name pages and headings that exist."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from django_workers.documentation import SITE, docs_url

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"


def heading_ids(page: Path) -> set[str]:
    """The ids the site gives the page's headings (GitHub's rule, as mkdocs.yml sets)."""
    ids = set()
    for line in page.read_text().splitlines():
        if match := re.match(r"#{1,6} (.*)", line):
            text = re.sub(r"[^\w\- ]", "", match.group(1).replace("`", "")).strip().lower()
            ids.add(text.replace(" ", "-"))
    return ids


def linked_from_code() -> list[tuple[str, str]]:
    """Every docs_url(page[, heading]) call of the library, with constant arguments."""
    calls = []
    for path in (ROOT / "django_workers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "docs_url"
            ):
                args = [ast.literal_eval(arg) for arg in node.args]
                calls.append((args[0], args[1] if len(args) > 1 else ""))
    return calls


def test_every_link_of_the_library_names_a_page_and_heading_of_the_site() -> None:
    calls = linked_from_code()
    assert ("install", "behind-pgbouncer") in calls
    for page, heading in calls:
        source = DOCS / f"{page}.md"
        assert source.is_file(), f"docs_url({page!r}) names no page: {source} does not exist"
        if heading:
            assert heading in heading_ids(source), f"{page}.md has no heading with id {heading!r}"


def test_the_site_is_where_pyproject_and_mkdocs_say() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Documentation"] == SITE
    assert f"site_url: {SITE}\n" in (ROOT / "mkdocs.yml").read_text()
    assert docs_url("install", "sqlite") == f"{SITE}install/#sqlite"
