"""MkDocs hooks of the documentation site (mkdocs.yml names this file; scripts/docs builds it).

- ``<!-- generated: options of COMMAND -->`` in a page becomes the table of that management
  command's options, read from its argparse parser; ``<!-- generated: exit codes of
  runworkers -->`` the table of the exit codes its ``--help`` prints. They cannot drift.
- The settings table of ``reference/settings.md`` is written by hand (types and meanings
  are prose) and checked here against ``django_workers.conf.DEFAULTS``: a key missing, extra
  or with another default is a warning, which ``mkdocs build --strict`` makes an error.
- A relative link that leaves ``docs/`` (``../benchmarks/HISTORY.md``) points at the file
  in the repository on GitHub, and a missing file is a warning.
"""

from __future__ import annotations

import argparse
import ast
import logging
import re
from pathlib import Path
from typing import Any

REPOSITORY = "https://github.com/django-workers-db/django-workers-db"
ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("mkdocs.hooks.django_workers")

#: Options every management command has; the page says so once instead of in every table.
DJANGO_COMMON = {"help", "settings", "pythonpath", "traceback", "no_color", "force_color"}

GENERATED = re.compile(r"<!-- generated: (options|exit codes) of ([a-z]+) -->")
#: A Markdown link or image target: ](target) or ](target#anchor).
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def on_config(config: Any) -> Any:
    """Set up Django with django_workers installed, so the commands' parsers can be built."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=[
                "django.contrib.contenttypes",
                "django.contrib.auth",
                "django_workers",
            ],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            USE_TZ=True,
        )
        django.setup()
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    markdown = GENERATED.sub(lambda m: _generated(m.group(1), m.group(2), src), markdown)
    if src == "reference/settings.md":
        for problem in settings_table_problems(markdown):
            log.warning("%s: %s", src, problem)
    return _repository_links(markdown, src, Path(config["docs_dir"]))


# -- management commands --


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser ``manage.py NAME`` builds, as ``--help`` shows it."""
    from django.core.management import load_command_class

    return load_command_class("django_workers", name).create_parser("manage.py", name)


def options_table(parser: argparse.ArgumentParser) -> str:
    """A Markdown table of the parser's own arguments (Django's common options left out)."""
    formatter = parser._get_formatter()
    rows = ["| argument | meaning |", "|---|---|"]
    for action in parser._actions:
        if action.dest in DJANGO_COMMON or isinstance(action, argparse._SubParsersAction):
            continue
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{_invocation(action)}` | {_cell(text)} |")
    return "\n".join(rows)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """The subcommands of a parser: name -> (help, parser)."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (helps.get(name, ""), sub)
    return found


def exit_codes(epilog: str) -> list[tuple[str, str]]:
    """The (code, meaning) lines of the "exit codes:" paragraph of a command's epilog."""
    codes: list[tuple[str, str]] = []
    inside = False
    for line in epilog.splitlines():
        if line.strip() == "exit codes:":
            inside = True
        elif inside and (match := re.match(r"\s+(\d+)\s+(.*)", line)):
            codes.append((match.group(1), match.group(2)))
        elif inside:
            break
    return codes


def _generated(what: str, command: str, src: str) -> str:
    try:
        parser = command_parser(command)
    except Exception as error:  # any failure is a warning, which --strict makes fatal
        log.warning("%s: cannot build the parser of %r: %s", src, command, error)
        return ""
    if what == "exit codes":
        codes = exit_codes(parser.epilog or "")
        if not codes:
            log.warning("%s: %r's --help lists no exit codes", src, command)
        rows = ["| code | meaning |", "|---|---|"]
        rows += [f"| {code} | {_cell(meaning)} |" for code, meaning in codes]
        return "\n".join(rows)
    parts = [options_table(parser)]
    for name, (text, sub) in subcommands(parser).items():
        parts.append(f"### `{command} {name}`\n\n{_cell(text)}\n\n{options_table(sub)}")
    return "\n\n".join(parts)


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        metavar = action.metavar or action.dest
        return f"{metavar} ..." if action.nargs in ("+", "*") else str(metavar)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    if action.choices:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    return f"{names} {metavar}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- settings --


def settings_table_problems(markdown: str) -> list[str]:
    """How the page's table of ``DJANGO_WORKERS`` keys differs from ``conf.DEFAULTS``.

    The table's rows are ``| `KEY` | type | `default` | meaning |``; the default is a Python
    literal.
    """
    from django_workers.conf import DEFAULTS

    cell = r"(?:[^|\\]|\\.)+"  # a table cell, where "\|" is a | inside it
    rows = re.findall(rf"^\| `([A-Z_]+)` \|{cell}\| `([^`]*)` \|", markdown, flags=re.MULTILINE)
    problems = []
    documented = {}
    for key, default in rows:
        try:
            documented[key] = ast.literal_eval(default)
        except (ValueError, SyntaxError):
            problems.append(f"the default of {key}, {default!r}, is not a Python literal")
    for key in DEFAULTS.keys() - documented.keys():
        problems.append(f"{key} is a setting (django_workers/conf.py) without a row")
    for key in documented.keys() - DEFAULTS.keys():
        problems.append(f"{key} has a row but is not a setting in django_workers/conf.py")
    for key in DEFAULTS.keys() & documented.keys():
        if documented[key] != DEFAULTS[key]:
            problems.append(
                f"{key}'s default is {DEFAULTS[key]!r} in django_workers/conf.py, "
                f"the table says {documented[key]!r}"
            )
    return sorted(problems)


# -- links out of docs/ --


def _repository_links(markdown: str, src: str, docs_dir: Path) -> str:
    page_dir = (docs_dir / src).parent

    def point(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return match.group(0)
        resolved = (page_dir / target).resolve()
        if resolved.is_relative_to(docs_dir.resolve()):
            return match.group(0)  # mkdocs checks links between pages itself
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            log.warning("%s: the link %r names no file of the repository", src, target)
            return match.group(0)
        kind = "tree" if resolved.is_dir() else "blob"
        url = f"{REPOSITORY}/{kind}/main/{resolved.relative_to(ROOT).as_posix()}"
        return f"{match.group(1)}{url}{match.group(3) or ''}{match.group(4)}"

    return LINK.sub(point, markdown)
