"""What PyPI shows: the README's links, the project's addresses, its classifiers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import django

from django_workers.documentation import SITE

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HOME = PROJECT["urls"]["Homepage"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_readme_link_is_absolute_and_names_a_file_or_page_of_this_repository() -> None:
    # PyPI renders the README away from the repository: a relative link would break there.
    links = LINK.findall((ROOT / "README.md").read_text())
    assert links
    for link in links:
        if link.startswith(SITE):  # a page of the site, built from docs/
            page = link.removeprefix(SITE).split("#")[0].rstrip("/") or "index"
            assert (ROOT / "docs" / f"{page}.md").is_file(), link
            continue
        assert link.startswith(f"{HOME}/"), link
        path = re.sub(r"^(tree|blob)/main/", "", link.removeprefix(f"{HOME}/")).split("#")[0]
        assert (ROOT / path).exists(), link


def test_the_project_urls_live_under_the_homepage_or_the_site() -> None:
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Issues", "Changelog"}
    assert urls["Documentation"] == SITE
    for name in ("Issues", "Changelog"):
        assert urls[name].startswith(HOME)


def test_the_classifiers_name_the_python_and_django_versions_in_use() -> None:
    import sys

    classifiers = set(PROJECT["classifiers"])
    python = f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}"
    assert python in classifiers
    assert f"Framework :: Django :: {django.VERSION[0]}.{django.VERSION[1]}" in classifiers
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_package_data_carries_the_sql_files() -> None:
    # The statements are read from these files at import: a wheel without them cannot start.
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = data["package-data"]["django_workers"]
    package = ROOT / "django_workers"
    shipped = {p for g in globs for p in package.glob(g)}
    found = set((package / "stores" / "sql").rglob("*.sql"))
    assert found
    assert found <= shipped
