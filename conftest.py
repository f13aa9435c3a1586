"""Run the Python code blocks of README.md and docs/*.md as tests, with Sybil.

Each page runs top to bottom in one namespace, on the test database, while a
worker runtime serves every queue on a thread, as ``runworkers`` would (see
``tests/docs_site.py``). A Python block that cannot run is preceded by the
invisible marker ``<!-- skip: next -->``; blocks in other languages (``sh``,
``text``, ``ini``) are never run.
"""

from __future__ import annotations

from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

from tests.docs_site import PageEvaluator, docs_database, docs_site, setup_page  # noqa: F401

pytest_collect_file = Sybil(
    parsers=[CodeBlockParser("python", PageEvaluator()), SkipParser()],
    patterns=["README.md", "docs/*.md"],
    # The tutorial runs in a new project of its own: tests/integration/test_tutorial.py.
    excludes=["docs/tutorial.md"],
    fixtures=["docs_site"],
    setup=setup_page,
).pytest()
