"""Where the documentation site is, for messages that send the reader to a page of it.

A pip user has no ``docs/`` folder: hints point at the published site instead.
``tests/unit/test_documentation_links.py`` checks that every page and heading
named through ``docs_url`` exists in ``docs/``.
"""

from __future__ import annotations

#: The site scripts/docs builds from docs/ (mkdocs.yml's site_url).
SITE = "https://django-workers-db.github.io/django-workers-db/"


def docs_url(page: str, heading: str = "") -> str:
    """The address of ``docs/<page>.md`` on the site, at the heading id ``heading`` if given."""
    return f"{SITE}{page}/" + (f"#{heading}" if heading else "")
