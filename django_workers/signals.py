"""Signals the runtime sends about runs; receivers are connected in ``AppConfig.ready()``.

Both are sent with ``send_robust``: a failing receiver is logged and never
stops a worker. ``run_finished`` is sent from a reporting thread after the end
is in the database, so a slow receiver never delays a terminal write.
"""

from __future__ import annotations

from django.dispatch import Signal

#: A run is about to call its task function. Keyword argument: ``info`` (the claimed TaskInfo).
run_started = Signal()

#: A record ended through a run of this runtime, a cancel of its run, or the zombie sweep.
#: Keyword argument: ``info`` (the TaskInfo as the record now reads).
run_finished = Signal()
