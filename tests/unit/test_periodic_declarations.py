"""Declaring schedules: the ``@periodic`` decorator, ``DJANGO_WORKERS["SCHEDULES"]``, the checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_workers import InvalidSchedule, TaskOptions, periodic
from django_workers.checks import check_workers_settings
from django_workers.periodic.declarations import Schedule, declared, registry
from tests import tasks


@pytest.fixture(autouse=True)
def _own_registry() -> Iterator[None]:
    before = registry.all()
    yield
    for key in registry.all():
        if key not in before:
            registry.remove(key)


# -- the decorator --------------------------------------------------------------------------


def test_the_decorator_registers_a_plain_function_by_its_dotted_path() -> None:
    returned = periodic("*/5 * * * *", key="noop-every-5", queue="reports")(tasks.noop)
    assert returned is tasks.noop
    schedule = registry.all()["noop-every-5"]
    assert schedule.task == "tests.tasks.noop"
    assert (schedule.cron, schedule.queue, schedule.catch_up, schedule.owner) == (
        "*/5 * * * *",
        "reports",
        "latest",
        None,
    )


def test_the_decorator_takes_a_django_task_and_defaults_the_key_to_its_path() -> None:
    returned = periodic(every=60, options=TaskOptions(retries=2))(tasks.django_add)
    assert returned is tasks.django_add
    schedule = registry.all()[tasks.django_add.module_path]
    assert schedule.task == tasks.django_add.module_path
    assert schedule.options == TaskOptions(retries=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "every five minutes"}, "five fields"),
        ({"cron": "* * * * *", "every": 5}, "exactly one"),
        ({"cron": "* * * * *", "catch_up": "some"}, '"catch_up"'),
        ({"cron": "* * * * *", "catch_up_window": 10}, "from 60 to"),
        ({"cron": "* * * * *", "catch_up_window": float("inf")}, "ten years"),
        ({"cron": "* * * * *", "catch_up_window": 10**12}, "ten years"),
        ({"cron": "* * * * *", "timezone": "Paris"}, "Unknown time zone"),
        ({"cron": "* * * * *", "owner": "a::b"}, '"owner"'),
        ({"cron": "* * * * *", "key": "two words"}, "spaces"),
        ({"cron": "* * * * *", "args": "abc"}, '"args" must be a list'),
        ({"cron": "* * * * *", "kwargs": {"when": object()}}, "JSON"),
        ({"cron": "* * * * *", "options": {"retries": 1}}, "TaskOptions"),
        ({"cron": "* * * * *", "enabled": "yes"}, '"enabled"'),
        ({"cron": "* * * * *", "queue": "two words"}, '"queue"'),
        ({"cron": "* * * * *", "priority": 101}, '"priority"'),
    ],
)
def test_bad_input_to_the_decorator_raises_at_the_declaration(kwargs, message) -> None:
    cron = kwargs.pop("cron")
    with pytest.raises(InvalidSchedule, match=message):
        periodic(cron, **kwargs)
    assert isinstance(InvalidSchedule("x"), ValueError)


def test_the_decorator_refuses_a_function_a_worker_cannot_import() -> None:
    def nested() -> None:
        pass

    with pytest.raises(InvalidSchedule, match="module level"):
        periodic("* * * * *", key="nested")(nested)


def test_a_key_is_one_task_s() -> None:
    periodic("* * * * *", key="shared")(tasks.noop)
    periodic("*/2 * * * *", key="shared")(tasks.noop)  # the same task again: a reload
    with pytest.raises(InvalidSchedule, match=r"already declared for tests\.tasks\.noop"):
        periodic("* * * * *", key="shared")(tasks.add)


# -- the setting and its checks ----------------------------------------------------------


def check_ids() -> list[str | None]:
    return [e.id for e in check_workers_settings()]


def test_a_good_setting_declares_schedules_and_passes_the_checks() -> None:
    schedules = {
        "nightly": {"task": "tests.tasks.noop", "cron": "@daily", "timezone": "Europe/Paris"},
        "often": {
            "task": "tests.tasks.add",
            "every": 30,
            "args": [1, 2],
            "options": {"retries": 1, "timeout": 10},
            "catch_up": "all",
            "catch_up_window": 600,
            "owner": "ann",
            "queue": "reports",
            "priority": 5,
            "enabled": False,
        },
    }
    with override_settings(DJANGO_WORKERS={"SCHEDULES": schedules}):
        assert check_ids() == []
        found, problems = declared()
    assert problems == []
    assert found["often"] == Schedule(
        key="often",
        task="tests.tasks.add",
        every=30,
        args=(1, 2),
        options=TaskOptions(retries=1, timeout=10),
        catch_up="all",
        catch_up_window=600,
        owner="ann",
        queue="reports",
        priority=5,
        enabled=False,
    )
    assert found["nightly"].timing.cron == "0 0 * * *"


@pytest.mark.parametrize(
    ("schedules", "check_id", "text"),
    [
        ([], "E015", "must be a dict"),
        ({"a": "tests.tasks.noop"}, "E015", "must be a dict"),
        ({"a": {"task": "tests.tasks.noop", "crom": "* * * * *"}}, "E016", "Did you mean 'cron'"),
        ({"a": {"task": "tests.tasks.noop", "cron": "* * *"}}, "E017", "five fields"),
        ({"a": {"cron": "* * * * *"}}, "E017", '"task" is missing'),
        ({"a": {"task": "tests.tasks.noop", "every": 5, "options": {"retry": 1}}}, "E017", "retry"),
        ({"a b": {"task": "tests.tasks.noop", "every": 5}}, "E017", "spaces"),
        ({"a": {"task": "tests.tasks.nothing_here", "every": 5}}, "E018", "Cannot import"),
        ({"a": {"task": "os.getcwd", "every": 5}}, "E018", "TASK_MODULES"),
        (
            {"a": {"task": "tests.tasks.noop", "every": 5, "options": {"retry_on": ["os.sep"]}}},
            "E017",
            "'os.sep' is a str, not an exception class",
        ),
        (
            {"a": {"task": "tests.tasks.noop", "every": 5, "options": {"retry_on": "nope"}}},
            "E017",
            "retry_on takes exception classes",
        ),
    ],
)
def test_a_bad_setting_is_a_check_error_that_says_what_to_write(schedules, check_id, text) -> None:
    with override_settings(DJANGO_WORKERS={"SCHEDULES": schedules}):
        errors = check_workers_settings()
    assert [e.id for e in errors] == [f"django_workers.{check_id}"]
    assert errors[0].hint is not None
    assert text in errors[0].msg + errors[0].hint


def test_a_key_declared_in_the_setting_and_by_the_decorator_is_an_error() -> None:
    periodic("* * * * *", key="twice")(tasks.noop)
    setting = {"twice": {"task": "tests.tasks.add", "every": 60}}
    with override_settings(DJANGO_WORKERS={"SCHEDULES": setting}):
        errors = check_workers_settings()
        found, _problems = declared()
    assert [e.id for e in errors] == ["django_workers.E019"]
    assert found["twice"].task == "tests.tasks.add"
