"""The pytest fixture ``workers``, registered through the ``pytest11`` entry point.

pytest loads this module before Django is configured, so it imports nothing of
Django's or of django-workers' at import time; the fixture does, when a test asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_workers.testing import Workers


@pytest.fixture
def workers(db: None) -> Workers:
    """Run the tasks a test submitted, in its own thread and transaction: ``workers.run()``."""
    from django_workers.testing import Workers

    return Workers()
