"""What ``runworkers --help`` and ``--version`` tell an operator."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

import django_workers
from django_workers.management.commands.runworkers import Command


def help_text() -> str:
    return Command().create_parser("manage.py", "runworkers").format_help()


def test_the_version_is_the_installed_distribution_s() -> None:
    assert django_workers.__version__ == metadata.version("django-workers-db")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", django_workers.__version__)


def test_version_prints_the_package_version_not_django_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        Command().create_parser("manage.py", "runworkers").parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == django_workers.__version__


@pytest.mark.parametrize(
    "default",
    [
        "serve (default: all)",
        "per process (default: 4)",
        "to start (default: 1)",
        "goes back to its queue (default: 30)",
        "(default: off)",
        "(default: recover them)",
        "(default: DJANGO_WORKERS['POLL_INTERVAL'], 0.2)",
    ],
)
def test_help_shows_each_default(default: str) -> None:
    assert default in " ".join(help_text().split())


def test_help_lists_every_exit_code() -> None:
    codes = help_text().split("exit codes:\n", 1)[1]
    listed = [line.split()[0] for line in codes.splitlines() if line.strip()]
    assert listed == ["0", "1", "2", "3", "4", "5", "130"]
    assert "lease taken" in codes


def test_help_says_what_each_verbosity_shows() -> None:
    text = help_text()
    verbosity = text.split("verbosity (-v):\n", 1)[1].split("exit codes:", 1)[0]
    assert [line.split()[0] for line in verbosity.splitlines()[:3]] == ["0", "1", "2"]
    assert "traceback" in verbosity
    assert "django_workers.runtime.tasks" in verbosity
