"""``django_workers.task`` defaults, TaskOptions' given fields and retry rules, and the
rule that only tasks run: pure checks, no worker."""

from __future__ import annotations

import re
import smtplib
import subprocess
import sys
from typing import Any

import pytest
from django.tasks import Task
from django.test import override_settings

import django_workers
from django_workers import InvalidTaskOptions, TaskNotAllowed, TaskNotImportable, TaskOptions
from django_workers.checks import check_workers_settings
from django_workers.options import MAX_EXCEPTIONS
from django_workers.references import declared_options, module_allowed, resolve, task_reference
from django_workers.stores.rows import options_of
from django_workers.submission import effective_options
from tests import tasks

# -- which fields a TaskOptions sets ------------------------------------------------------


def test_an_option_given_is_known_as_given_even_at_its_default_value() -> None:
    assert TaskOptions().given == frozenset()
    assert TaskOptions(retries=0, timeout=None).given == {"retries", "timeout"}
    # Equal all the same: the values are what a record stores.
    assert TaskOptions(retries=0) == TaskOptions()
    assert TaskOptions.from_json({"retries": 2, "retry_jitter": True}).given == {
        "retries",
        "retry_jitter",
    }


def test_call_options_override_the_declared_defaults_field_by_field() -> None:
    declared = TaskOptions(retries=3, timeout=60, retry_on=[ConnectionError])
    merged = TaskOptions(timeout=5, retry_jitter=False).over(declared)
    assert (merged.retries, merged.timeout, merged.retry_jitter, merged.retry_on) == (
        3,
        5,
        False,
        ("builtins.ConnectionError",),
    )
    # A field given at its default value still overrides the declaration.
    assert TaskOptions(retries=0).over(declared).retries == 0
    assert TaskOptions(retry_on=[]).over(declared).retry_on == ()
    assert TaskOptions(timeout=5).over(None) == TaskOptions(timeout=5)


def test_a_submit_takes_the_declaration_unless_options_are_given() -> None:
    declared = declared_options(tasks.retried_on_connection_errors)
    assert declared is not None
    assert effective_options(None, declared) is declared
    assert effective_options(None, None) == TaskOptions()
    assert effective_options(TaskOptions(retries=1), declared).timeout == 60
    with pytest.raises(InvalidTaskOptions, match="options must be a TaskOptions, got dict"):
        effective_options({"retries": 1}, declared)


# -- retry_on and retry_never ------------------------------------------------------------


def test_exception_options_are_kept_as_dotted_paths_and_round_trip_as_json() -> None:
    options = TaskOptions(retry_on=[ConnectionError, "smtplib.SMTPException"], retry_never=KeyError)
    assert options.retry_on == ("builtins.ConnectionError", "smtplib.SMTPException")
    assert options.retry_never == ("builtins.KeyError",)
    stored = options.to_json()
    assert stored["retry_on"] == ["builtins.ConnectionError", "smtplib.SMTPException"]
    assert TaskOptions.from_json(stored) == options
    # Options without them store exactly what they always did (plan hashes stay).
    assert TaskOptions(retries=2).to_json() == {"retries": 2, "retry_jitter": True}


def test_a_submit_names_each_exception_by_the_class_its_path_imports() -> None:
    # socket.timeout is an alias of TimeoutError: stored as the class is named.
    checked = TaskOptions(retry_on=["socket.timeout"]).checked()
    assert checked.retry_on == ("builtins.TimeoutError",)


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (["no_such_module.Error"], "'no_such_module.Error' does not import"),
        (["os.getcwd"], "is a builtin_function_or_method, not an exception class"),
        (["smtplib.SMTP"], "is a type, not an exception class"),
    ],
)
def test_an_exception_path_that_is_no_exception_class_is_refused_at_submit(
    refs: list[str], message: str
) -> None:
    options = TaskOptions(retry_on=refs)  # a path is imported at submit, not when written
    with pytest.raises(InvalidTaskOptions, match=message) as caught:
        options.checked()
    assert "full dotted path, e.g. 'smtplib.SMTPException'" in str(caught.value)


@pytest.mark.parametrize(
    "bad",
    [3, [3], ["not a path"], [ValueError()], [int], b"builtins.KeyError", {"a": 1}],
    ids=["int", "list-of-int", "spaces", "instance", "not-an-exception", "bytes", "dict"],
)
def test_an_exception_option_of_the_wrong_kind_is_refused_when_written(bad: Any) -> None:
    with pytest.raises(InvalidTaskOptions, match="retry_never"):
        TaskOptions(retry_never=bad)


def test_an_exception_option_of_too_many_classes_is_refused() -> None:
    with pytest.raises(InvalidTaskOptions, match=f"at most {MAX_EXCEPTIONS}"):
        TaskOptions(retry_on=[ValueError] * (MAX_EXCEPTIONS + 1))


def test_a_stored_exception_option_of_no_valid_kind_reads_as_none() -> None:
    assert TaskOptions.from_json({"retries": 2, "retry_on": 7}) == TaskOptions(retries=2)


def test_retry_on_retries_only_its_exceptions_and_their_subclasses() -> None:
    options = TaskOptions(retry_on=[ConnectionError, "smtplib.SMTPException"])
    assert options.retries_error(tasks.ServiceDown())  # a subclass of ConnectionError
    assert options.retries_error(smtplib.SMTPServerDisconnected())
    assert not options.retries_error(ValueError())


def test_retry_never_wins_over_retry_on() -> None:
    options = TaskOptions(retry_on=[LookupError], retry_never=[KeyError])
    assert options.retries_error(IndexError())
    assert not options.retries_error(KeyError())
    assert TaskOptions().retries_error(KeyError())


# -- the decorator ----------------------------------------------------------------------------


def test_the_decorator_returns_a_django_task_with_its_options_declared() -> None:
    assert isinstance(tasks.declared_flaky, Task)
    assert tasks.declared_flaky.backend == "workers"
    declared = declared_options(tasks.declared_flaky)
    assert declared == TaskOptions(retries=2, retry_backoff=0.05, retry_jitter=False)
    assert declared is not None
    assert declared.given == {"retries", "retry_backoff", "retry_jitter"}
    # Found again by the path a record stores.
    assert task_reference("tests.tasks.declared_flaky") == (
        "tests.tasks.declared_flaky",
        declared,
    )


def test_the_decorator_bare_declares_no_options() -> None:
    assert isinstance(tasks.declared_add, Task)
    assert tasks.declared_add.call(2, 3) == 5
    declared = declared_options(tasks.declared_add)
    assert declared is not None
    assert declared.given == frozenset()


def report(context: Any) -> None:
    """Declared by a test below."""


def test_the_decorator_takes_djangos_arguments() -> None:
    declared = django_workers.task(priority=7, backend="workers", takes_context=True)(report)
    assert (declared.priority, declared.backend, declared.takes_context) == (7, "workers", True)


def test_the_decorator_refuses_a_bad_option_when_the_task_is_declared() -> None:
    with pytest.raises(InvalidTaskOptions, match="retries must be 0 to 100"):
        django_workers.task(retries=1000)


def test_the_decorator_refuses_what_is_no_function() -> None:
    with pytest.raises(TypeError, match=re.escape("use it instead of django.tasks' @task")):
        django_workers.task(tasks.django_add)  # type: ignore[call-overload]


# -- only tasks run ------------------------------------------------------------------------------


def test_tasks_live_in_installed_apps_and_task_modules_only() -> None:
    assert module_allowed("tests.tasks")
    assert module_allowed("tests")
    assert not module_allowed("testsuite.tasks")  # a prefix is a whole module name
    assert not module_allowed("os")
    with override_settings(DJANGO_WORKERS={"TASK_MODULES": ["shop.jobs"]}):
        assert module_allowed("shop.jobs.nightly")
        assert not module_allowed("shop.views")
    assert not module_allowed("shop.jobs.nightly")  # forgotten with the setting


def test_a_path_outside_them_is_refused_without_importing_its_module() -> None:
    # Importing "this" prints the Zen of Python: a side effect the refusal must not have.
    sys.modules.pop("this", None)
    with pytest.raises(TaskNotAllowed, match="TASK_MODULES") as caught:
        resolve("this.s")
    assert "this" not in sys.modules
    assert isinstance(caught.value, TaskNotImportable)  # what submit has always raised


def test_a_function_imported_into_an_app_module_is_no_task() -> None:
    assert tasks.getoutput is subprocess.getoutput
    with pytest.raises(TaskNotAllowed, match="from 'subprocess', which is no task"):
        resolve("tests.tasks.getoutput")


@pytest.mark.parametrize(
    "path",
    [
        "django.contrib.auth.hashers.make_password",
        "django_workers.operations.retry_as",
        "django_workers.api.submit_task",
    ],
)
def test_a_plain_function_of_djangos_or_this_apps_own_packages_is_no_task(path: str) -> None:
    with pytest.raises(TaskNotAllowed, match="which is no task"):
        resolve(path)


def test_task_modules_may_still_name_a_module_of_those_packages() -> None:
    with override_settings(DJANGO_WORKERS={"TASK_MODULES": ["django.contrib.auth.hashers"]}):
        assert callable(resolve("django.contrib.auth.hashers.make_password"))
    with pytest.raises(TaskNotAllowed):
        resolve("django.contrib.auth.hashers.make_password")  # forgotten with the setting


def test_a_path_allowed_once_is_judged_again_when_it_imports_something_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve("tests.tasks.add") is tasks.add
    monkeypatch.setattr(tasks, "add", subprocess.getoutput)
    with pytest.raises(TaskNotAllowed, match="from 'subprocess', which is no task"):
        resolve("tests.tasks.add")


def test_tasks_functions_and_django_tasks_of_an_app_resolve() -> None:
    assert resolve("tests.tasks.add") is tasks.add
    assert resolve("tests.tasks.django_add") is tasks.django_add
    assert resolve("tests.tasks.declared_flaky") is tasks.declared_flaky


@pytest.mark.parametrize("value", ["tests", ["bad module"], [""], [3], {"tests": 1}], ids=str)
def test_a_task_modules_setting_that_is_no_list_of_modules_is_reported(value: Any) -> None:
    with override_settings(DJANGO_WORKERS={"TASK_MODULES": value}):
        errors = [e for e in check_workers_settings() if e.id == "django_workers.E022"]
    assert len(errors) == 1
    assert "must be a list of module names" in errors[0].msg


def test_a_task_modules_setting_of_module_names_passes_the_check() -> None:
    with override_settings(DJANGO_WORKERS={"TASK_MODULES": ["shop", "myproject.jobs"]}):
        assert not [e for e in check_workers_settings() if e.id == "django_workers.E022"]


def test_stored_retry_rules_are_read_once_for_each_distinct_value() -> None:
    stored = {"retries": 1, "retry_jitter": True, "retry_on": ["builtins.KeyError"]}
    first = options_of(dict(stored, retry_on=["builtins.KeyError"]))
    assert options_of(dict(stored, retry_on=["builtins.KeyError"])) is first
    other = options_of(dict(stored, retry_on=["builtins.OSError"]))
    assert other.retry_on == ("builtins.OSError",)
    assert first.retry_on == ("builtins.KeyError",)
