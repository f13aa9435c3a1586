"""Sharing a workflow: the watchers a ``Workflow`` names, checked and authorized at submit.

Watchers get what the owner gets (read, list, cancel, the nodes' records), by
``visibility``'s rule. They are settled at submit: the builder checks them with
the rest of the plan, and the watch authorizer is asked about each before
anything is written.
"""

from __future__ import annotations

from collections.abc import Collection

from django_workers.authority import Authority, Owner, user_id_of
from django_workers.exceptions import AuthorizationError
from django_workers.stores import WorkerStore
from django_workers.workflows.plan import WorkflowPlan


def watcher_ids(watchers: object, authority: Authority, problems: list[str]) -> tuple[str, ...]:
    """The user ids of ``watchers`` besides the submitter, each once; problems recorded."""
    if isinstance(watchers, str | Owner) or not isinstance(watchers, Collection):
        problems.append(
            f"watchers must be a list of Owner(...) objects, got {type(watchers).__name__}."
        )
        return ()
    submitter = user_id_of(authority)
    ids: list[str] = []
    for watcher in watchers:
        if not isinstance(watcher, Owner):
            problems.append(
                f"watchers must be Owner(...) objects, got {type(watcher).__name__}; "
                "System() already sees every workflow."
            )
        elif watcher.user_id != submitter and watcher.user_id not in ids:
            ids.append(watcher.user_id)
    return tuple(ids)


def authorize_watchers(plan: WorkflowPlan, authority: Authority, store: WorkerStore) -> None:
    """Ask the watch authorizer about each watcher an Owner grants; System() needs no leave.

    It is asked ``fn(workflow id, (owner,), watcher)``: may this user watch what its
    owner alone sees now. Without one, an Owner may grant no one (as no one may join).
    """
    if not isinstance(authority, Owner) or not plan.watchers:
        return
    allow = store.watch_authorizer
    refused = [
        w for w in plan.watchers if allow is None or not allow(plan.id, (authority.user_id,), w)
    ]
    if refused:
        raise AuthorizationError(
            f"Workflow {plan.key!r} may not be shared with {', '.join(map(repr, refused))}: "
            + (
                "no watch authorizer is configured (set DJANGO_WORKERS['WATCH_AUTHORIZER']), "
                if allow is None
                else "the watch authorizer refused, "
            )
            + "so nothing was written. Leave them out of watchers, or submit as System()."
        )
