"""The shop's background tasks.

Each is a module-level function: a worker in another process imports it by its
dotted path (``shop.tasks.resize_images``), so it takes and returns JSON-friendly
values only. ``time.sleep`` stands in for real work. Long tasks look at
``current_run().raise_if_cancelled()`` between steps: nothing interrupts a
running task from outside, so this is how a cancel, a timeout or a worker
shutdown actually stops it.
"""

from __future__ import annotations

import smtplib
import time

from django.tasks import task

import django_workers
from django_workers import Retry, current_run, update_progress

#: Seconds of pretend work per step.
STEP = 0.05


def resize_images(order_id: int, images: int) -> dict[str, int]:
    """Resize the images of an order, reporting progress after each one."""
    for done in range(1, images + 1):
        current_run().raise_if_cancelled()
        time.sleep(STEP)
        update_progress(current_run(), 100 * done / images)
    return {"order": order_id, "resized": images}


def charge_card(order_id: int, outage_attempts: int) -> str:
    """Charge an order; the payment gateway is down for the first ``outage_attempts`` attempts.

    The attempt number comes from the task record, not from a counter in this
    process, so it stays right when a retry runs in another worker.
    """
    attempt = current_run().attempts
    if attempt <= outage_attempts:
        raise ConnectionError(f"payment gateway did not answer (attempt {attempt})")
    return f"order {order_id} charged on attempt {attempt}"


def refund_card(order_id: int) -> str:
    """Give back what ``charge_card`` took: the compensation step of a charge."""
    return f"order {order_id} refunded"


def track_parcel(order_id: int, busy_attempts: int) -> str:
    """Ask the courier where a parcel is; its API says "busy, ask again later" at first.

    ``Retry(after=...)`` asks for the next attempt when the API said to, and
    counts against the task's ``retries``, whatever ``retry_on`` says.
    """
    attempt = current_run().attempts
    if attempt <= busy_attempts:
        raise Retry("the courier's API is busy", after=2 * STEP)
    return f"order {order_id}: parcel in transit (asked {attempt} times)"


def export_catalog(products: int) -> int:
    """Export the catalogue, one product at a time; stops when cancelled."""
    for done in range(1, products + 1):
        current_run().raise_if_cancelled()
        time.sleep(STEP)
        update_progress(current_run(), 100 * done / products)
    return products


def write_report(pages: int, seconds_per_page: float) -> dict[str, int]:
    """Write a report page by page (the reports page watches it); stops when cancelled."""
    for done in range(1, pages + 1):
        current_run().raise_if_cancelled()
        time.sleep(seconds_per_page)
        update_progress(current_run(), 100 * done / pages)
    return {"pages": pages}


def sync_inventory(warehouse: str) -> None:
    """Pull stock levels from a warehouse that does not exist: always fails."""
    raise LookupError(f"warehouse {warehouse!r} is not configured")


def build_sales_report(seconds: float) -> str:
    """Work for ``seconds`` seconds; longer than its timeout allows."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        current_run().raise_if_cancelled()
        time.sleep(STEP)
    return "report built"


def refresh_exchange_rates() -> dict[str, float]:
    """Fetch today's exchange rates (a periodic task: see SCHEDULES in the settings)."""
    time.sleep(STEP)
    return {"EUR": 1.0, "USD": 1.08, "GBP": 0.85}


def ping_monitoring() -> str:
    """Tell the uptime monitor that the workers are alive (a periodic task, every 2 s)."""
    return "pong"


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> str:
    """Email the receipt of an order (the "emails" queue sends one at a time).

    A Django ``@task``: ``.enqueue()`` and ``submit_task`` both take it.
    """
    time.sleep(4 * STEP)
    return f"receipt for order {order_id} sent"


@django_workers.task(
    queue_name="emails",
    timeout=120,
    retries=5,
    retry_backoff=10,
    retry_on=[smtplib.SMTPException, ConnectionError],
)
def send_invoice(order_id: int) -> str:
    """Mail an order's invoice; a mail server that is away is tried again later.

    Declared with ``django_workers.task``: its timeout and retry rules apply
    wherever it is submitted, ``.enqueue()`` included.
    """
    time.sleep(STEP)
    return f"invoice for order {order_id} sent"


@task
def rebuild_search_index() -> dict[str, int]:
    """Rebuild the product search index: site-wide work that no user owns.

    A Django ``@task`` works with ``submit_task`` unchanged.
    """
    time.sleep(STEP)
    return {"products": 120}


# -- a photo upload workflow: upload -> two thumbnails -> email (always) -----------------


def upload_photo(photo_id: int) -> dict[str, str]:
    """Store an uploaded photo; its dependents read where it went from this result."""
    time.sleep(STEP)
    return {"path": f"/media/photos/{photo_id}.jpg"}


def make_thumbnail(size: int) -> str:
    """Make one thumbnail of the photo the ``upload`` node stored (too large sizes fail)."""
    path = current_run().workflow.result("upload")["path"]  # type: ignore[union-attr]
    if size > 1024:
        raise ValueError(f"a {size} px thumbnail is larger than the photo")
    time.sleep(STEP)
    return path.replace(".jpg", f"-{size}.jpg")


def email_photo_owner(photo_id: int, *thumbnails: str) -> str:
    """Tell the owner which thumbnails were made; an ``.always()`` node, so it runs anyway."""
    workflow = current_run().workflow
    made = [name for name in thumbnails if not workflow.failed(name)]  # type: ignore[union-attr]
    return f"photo {photo_id}: {len(made)} of {len(thumbnails)} thumbnails ready"


def delete_upload(photo_id: int) -> str:
    """Undo ``upload_photo``."""
    return f"photo {photo_id} deleted"


# -- an order saga: reserve -> charge -> ship, undone in reverse when shipping fails -------


def reserve_stock(order_id: int) -> str:
    time.sleep(STEP)
    return f"stock reserved for order {order_id}"


def release_stock(order_id: int) -> str:
    """Undo ``reserve_stock``; runs after the charge was refunded."""
    time.sleep(STEP)
    return f"stock released for order {order_id}"


def book_courier(order_id: int) -> str:
    """Book a courier that is never available: the step that makes the saga undo."""
    raise ConnectionError(f"no courier available for order {order_id}")
