"""The fault suite: workers against a private PostgreSQL cluster that the tests break.

Each test starts real ``runworkers`` subprocesses on a fresh database of a
private cluster (``cluster.py``), breaks something in the middle of a drain
(connections cut, the server stopped or crashed, workers stopped or killed),
and then checks with ``invariants.check_invariants`` that nothing was lost,
nothing ran twice at once and nothing ran again without a reason.

    ./scripts/test --db postgres tests/faults          # the suite's sizes, ~3 min
    WORKERS_FAULTS=full ./scripts/test --db postgres tests/faults   # the long variants

Each test's figures are printed at the end of the run ("fault-suite figures").
``scale.py`` lists the sizes and the variables that change them.
"""

from __future__ import annotations

import pytest
from django.conf import settings

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"

#: The marks of every fault-suite test module (``pytestmark = FAULT_TEST``).
FAULT_TEST = [
    pytest.mark.faults,
    pytest.mark.integration,
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        not ON_POSTGRES,
        reason="the fault suite runs its own PostgreSQL cluster, on PostgreSQL runs only "
        "(./scripts/test --db postgres tests/faults)",
    ),
]
