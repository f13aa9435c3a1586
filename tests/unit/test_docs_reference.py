"""The reference pages of the site agree with the code (scripts/docs_hooks.py builds them)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import ModuleType

import pytest

from django_workers.conf import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_settings_table_has_every_setting_with_its_default(hooks: ModuleType) -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert hooks.settings_table_problems(page) == []


def test_a_setting_without_a_row_or_with_another_default_is_a_problem(hooks: ModuleType) -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    without_store = "\n".join(line for line in page.splitlines() if "| `STORE` |" not in line)
    other_lease = page.replace("| `30.0` |", "| `60.0` |")
    assert hooks.settings_table_problems(without_store) == [
        "STORE is a setting (django_workers/conf.py) without a row"
    ]
    assert hooks.settings_table_problems(other_lease) == [
        "LEASE_TIMEOUT's default is 30.0 in django_workers/conf.py, the table says 60.0"
    ]
    assert len(DEFAULTS) == page.count("\n| `")


def test_the_options_tables_list_every_option_of_each_command(hooks: ModuleType) -> None:
    runworkers = hooks.options_table(hooks.command_parser("runworkers"))
    for option in ("--queues QUEUES", "--concurrency", "--burst", "--metrics-port", "-v"):
        assert f"| `{option}" in runworkers
    assert "--settings" not in runworkers  # Django's common options are said once, in prose
    workers = hooks.subcommands(hooks.command_parser("workers"))
    assert set(workers) == {
        "status", "list", "show", "cancel", "retry", "rerun-workflow", "purge", "schedules",
    }  # fmt: skip
    assert "| `--older-than OLDER_THAN` |" in hooks.options_table(workers["purge"][1])


def test_the_exit_codes_are_those_runworkers_help_prints(hooks: ModuleType) -> None:
    parser = hooks.command_parser("runworkers")
    codes = dict(hooks.exit_codes(parser.epilog))
    assert list(codes) == ["0", "1", "2", "3", "4", "5", "130"]
    assert codes["3"].startswith("the drain timeout passed")


def test_links_out_of_docs_point_at_the_repository(hooks: ModuleType) -> None:
    page = "See [the log](../benchmarks/HISTORY.md#drain) and [runtime](runtime.md#settings)."
    linked = hooks._repository_links(page, "performance.md", ROOT / "docs")
    assert linked == (
        f"See [the log]({hooks.REPOSITORY}/blob/main/benchmarks/HISTORY.md#drain) "
        "and [runtime](runtime.md#settings)."
    )


def test_the_rest_reference_has_every_route_of_the_urlconf(
    hooks: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    from django.urls import URLPattern, resolve

    from django_workers.rest import urls

    with caplog.at_level(logging.WARNING):
        page = hooks.rest_reference()
    assert caplog.records == []  # a route the OpenAPI schema leaves out is a warning
    # Each section's path, with an id in place of each {parameter}, resolves to the route it
    # documents: so every (method, route) the urlconf serves must have a section.
    documented = set()
    for method, path in re.findall(r"^### `([A-Z]+) (/\S+)`$", page, flags=re.MULTILINE):
        assert path.startswith(hooks.REST_PREFIX)
        concrete = re.sub(r"\{\w+\}", "42::a", path.removeprefix(hooks.REST_PREFIX.rstrip("/")))
        documented.add((method, resolve(concrete, urlconf=urls.__name__).url_name))
    served = set()
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        view = pattern.callback.cls  # type: ignore[attr-defined]
        for method in view.http_method_names:
            if method not in ("options", "head") and hasattr(view, method):
                served.add((method.upper(), pattern.name))
    assert served == documented
    assert ("PATCH", "workflow-rerun") in served
    assert ("GET", "schema") in served


def test_the_rest_reference_states_parameters_answers_and_bodies(hooks: ModuleType) -> None:
    page = hooks.rest_reference()
    assert "| `limit` | query | integer, 1 to 1000, default `100` | no |" in page
    assert "| 409 | [`Error`](#error) | The task has already ended. |" in page
    assert "### `Workflow`" in page
    assert "| `nodes` | array of [`WorkflowNode`](#workflownode) |" in page
    assert "| `error` | [`TaskFailure`](#taskfailure) or null |" in page
