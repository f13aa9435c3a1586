"""``WorkflowContext`` lives in ``django_workers.engine.context``; runtime/run.py imports it."""

from django_workers.engine.context import WorkflowContext

__all__ = ["WorkflowContext"]
