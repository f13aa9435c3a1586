"""MkDocs hooks of the documentation site (mkdocs.yml names this file; scripts/docs builds it).

- ``<!-- generated: options of COMMAND -->`` in a page becomes the table of that management
  command's options, read from its argparse parser; ``<!-- generated: exit codes of
  runworkers -->`` the table of the exit codes its ``--help`` prints. They cannot drift.
- ``<!-- generated: rest routes -->`` becomes the reference of every REST operation (method
  and path, parameters, request body, answers) and of the bodies, read from the OpenAPI
  schema drf-spectacular generates for the app's urlconf; that schema is also added to the
  site as ``reference/openapi.json``. A route of the urlconf the schema leaves out is a
  warning.
- ``<!-- generated: task states -->`` (and ``workflow``, ``node``, ``undo``) become Mermaid
  state diagrams: a task's moves read from ``lifecycle.FROM_STATUSES`` and ``TO_STATUSES``;
  a workflow's, its nodes' and their undo steps' found by running the workflow state
  machine on small plans.
- The settings table of ``reference/settings.md`` is written by hand (types and meanings
  are prose) and checked here against ``django_workers.conf.DEFAULTS``: a key missing, extra
  or with another default is a warning, which ``mkdocs build --strict`` makes an error.
- A relative link that leaves ``docs/`` (``../benchmarks/HISTORY.md``) points at the file
  in the repository on GitHub, and a missing file is a warning.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import logging
import re
from http import HTTPStatus
from pathlib import Path
from typing import Any

REPOSITORY = "https://github.com/django-workers-db/django-workers-db"
ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("mkdocs.hooks.django_workers")

#: Options every management command has; the page says so once instead of in every table.
DJANGO_COMMON = {"help", "settings", "pythonpath", "traceback", "no_color", "force_color"}

GENERATED = re.compile(r"<!-- generated: (options|exit codes) of ([a-z]+) -->")
REST_ROUTES = "<!-- generated: rest routes -->"
STATES = re.compile(r"<!-- generated: (task|workflow|node|undo) states -->")
#: Where the reference shows the REST API mounted, as docs/rest-api.md does.
REST_PREFIX = "/workers/"
REST_URLCONF = "django_workers.rest.urls"
#: The schema as a file of the site, next to the page that describes it.
SCHEMA_FILE = "reference/openapi.json"
#: A Markdown link or image target: ](target) or ](target#anchor).
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def on_config(config: Any) -> Any:
    """Set up Django with django_workers and DRF installed, for the commands' parsers and the
    REST API's schema."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=[
                "django.contrib.contenttypes",
                "django.contrib.auth",
                "rest_framework",
                "django_workers",
            ],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            USE_TZ=True,
        )
        django.setup()
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the REST API's OpenAPI schema to the site as ``reference/openapi.json``."""
    from mkdocs.structure.files import File

    try:
        content = json.dumps(rest_schema(), indent=2) + "\n"
    except Exception as error:  # any failure is a warning, which --strict makes fatal
        log.warning("cannot generate the OpenAPI schema: %s", error)
        return files
    files.append(File.generated(config, SCHEMA_FILE, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    markdown = GENERATED.sub(lambda m: _generated(m.group(1), m.group(2), src), markdown)
    diagrams = {
        "task": task_diagram,
        "workflow": workflow_diagram,
        "node": node_diagram,
        "undo": undo_diagram,
    }
    markdown = STATES.sub(lambda m: _logged(diagrams[m.group(1)], src), markdown)
    if REST_ROUTES in markdown:
        markdown = markdown.replace(REST_ROUTES, _logged(rest_reference, src))
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


# -- the REST API --


def rest_schema() -> dict[str, Any]:
    """The OpenAPI schema the app serves, for its routes mounted at ``REST_PREFIX``.

    Made by drf-spectacular's generator with the settings of the app's schema view, so it is
    the document ``GET /workers/schema/?format=json`` answers.
    """
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from django_workers.rest.schema import SETTINGS

    with patched_settings(SETTINGS):
        generator = SchemaGenerator(patterns=_rest_patterns())
        return dict(generator.get_schema(request=None, public=True))


def rest_endpoints() -> list[tuple[str, str, Any]]:
    """Every (method, path, view) of the app's REST urlconf, the schema's route too."""
    from drf_spectacular.generators import EndpointEnumerator

    endpoints = EndpointEnumerator(patterns=_rest_patterns()).get_api_endpoints()
    return [(method, path, view) for path, _regex, method, view in endpoints]


def rest_reference(
    schema: dict[str, Any] | None = None, endpoints: list[tuple[str, str, Any]] | None = None
) -> str:
    """The Markdown reference of the REST API: one section per operation, then the bodies."""
    from drf_spectacular.views import SpectacularAPIView

    schema = rest_schema() if schema is None else schema
    endpoints = rest_endpoints() if endpoints is None else endpoints
    components = schema.get("components", {}).get("schemas", {})
    groups: dict[str, list[str]] = {}
    described = set()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            described.add((method.upper(), path))
            tag = (operation.get("tags") or ["routes"])[0]
            groups.setdefault(tag, []).append(_operation(method, path, operation, components))
    parts = []
    for tag, sections in groups.items():
        parts.append(f"## {tag.capitalize()}\n\n" + "\n\n".join(sections))
    others = []
    for method, path, view in endpoints:
        if (method, path) in described:
            continue
        cls = getattr(view, "cls", None)
        if cls is not None and issubclass(cls, SpectacularAPIView):
            text = (
                f"The OpenAPI {schema.get('openapi', '3')} document of the routes above, "
                "in YAML; `?format=json` answers it in JSON. Anyone may read it: it "
                "describes the API, not any task."
            )
        else:
            log.warning("the REST route %s %s is not in the OpenAPI schema", method, path)
            text = _cell(_rst(getattr(cls, "__doc__", "") or ""))
        others.append(f"### `{method} {path}`\n\n{text}")
    if others:
        parts.append("## The schema route\n\n" + "\n\n".join(others))
    bodies = [
        _body(name, component, components)
        for name, component in components.items()
        if component.get("type") == "object"
    ]
    parts.append("## Bodies\n\n" + "\n\n".join(bodies))
    return "\n\n".join(parts)


def _rest_patterns() -> list[Any]:
    from django.urls import include, path

    return [path(REST_PREFIX.strip("/") + "/", include(REST_URLCONF))]


def _operation(
    method: str, path: str, operation: dict[str, Any], components: dict[str, Any]
) -> str:
    lines = [f"### `{method.upper()} {path}`", ""]
    summary = operation.get("summary", "")
    if summary:
        lines += [summary.rstrip(".") + ".", ""]
    if operation.get("description"):
        lines += [_cell(_rst(operation["description"])), ""]
    parameters = [p for p in operation.get("parameters", []) if p["in"] in ("path", "query")]
    parameters.sort(key=lambda p: (p["in"] != "path", p["name"]))
    if parameters:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in parameters:
            required = "yes" if p.get("required") else "no"
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}), components)} "
                f"| {required} | {_cell(_description(p.get('description', '')))} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            lines += [f"Request body ({media}): {_type(content.get('schema', {}), components)}", ""]
    else:
        lines += ["No request body.", ""]
    lines += ["| status | body | meaning |", "|---|---|---|"]
    for status, response in operation.get("responses", {}).items():
        content = response.get("content", {})
        shapes = [_type(c.get("schema", {}), components) for c in content.values()]
        meaning = _cell(response.get("description", "")) or HTTPStatus(int(status)).phrase
        lines.append(f"| {status} | {' or '.join(shapes) or 'none'} | {meaning} |")
    return "\n".join(lines)


def _body(name: str, component: dict[str, Any], components: dict[str, Any]) -> str:
    lines = [f"### `{name}`", ""]
    if component.get("description"):
        lines += [_cell(_rst(component["description"])), ""]
    lines += ["| field | type | description |", "|---|---|---|"]
    for field, schema in component.get("properties", {}).items():
        text = _cell(_description(schema.get("description", "")))
        lines.append(f"| `{field}` | {_type(schema, components)} | {text} |")
    return "\n".join(lines)


def _type(schema: dict[str, Any], components: dict[str, Any]) -> str:
    """A JSON schema in a few words: ``integer, 1 to 1000, default 100``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if "enum" in components.get(name, {}):
            return _type(components[name], components)
        return f"[`{name}`](#{name.lower()})"
    for key in ("allOf", "oneOf", "anyOf"):
        if key in schema:
            shown = [_type(part, components) for part in schema[key]]
            shown = [text for text in shown if text != "null"] + ["null"] * ("null" in shown)
            return " or ".join(dict.fromkeys(shown))
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    nullable = "null" in kinds
    kinds = [kind for kind in kinds if kind != "null"]
    if nullable and not kinds and "enum" not in schema:
        return "null"
    if "enum" in schema:
        values = [v for v in schema["enum"] if v is not None]
        text = "one of " + ", ".join(
            f"`{v if isinstance(v, str) else json.dumps(v)}`" for v in values
        )
    elif kinds == ["array"]:
        text = f"array of {_type(schema.get('items', {}), components)}"
    elif kinds:
        text = " or ".join(kinds)
    else:
        text = "any JSON value"
    if schema.get("format"):
        text += f" ({schema['format']})"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        text += f", {low if low is not None else '…'} to {high if high is not None else '…'}"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if high is not None:
        text += f", {low or 0} to {high} characters"
    if "|" not in schema.get("pattern", "|"):  # a | would end the table's cell
        text += f", matching `{schema['pattern']}`"
    if "default" in schema:
        text += f", default `{json.dumps(schema['default'])}`"
    return text + (" or null" if nullable else "")


def _description(text: str) -> str:
    """A description without drf-spectacular's list of enum labels (the type lists the values)."""
    return _rst(
        "\n".join(line for line in text.splitlines() if not re.match(r"\* `[^`]*` - ", line))
    )


def _rst(text: str) -> str:
    return text.replace("``", "`")


def _logged(make: Any, src: str) -> str:
    try:
        return str(make())
    except Exception as error:  # any failure is a warning, which --strict makes fatal
        log.warning("%s: cannot generate %s: %s", src, getattr(make, "__name__", make), error)
        return ""


# -- state diagrams --

#: A task's moves that are not ends of a run: (from, to, what makes it). ``None`` is "no record".
TASK_STARTS = (
    (None, "PENDING", "submit"),
    (None, "WAITING", "submit as a workflow node"),
    ("WAITING", "PENDING", "its workflow promotes it"),
    ("PENDING", "RUNNING", "a worker claims it"),
)


def task_moves() -> dict[tuple[str | None, str], list[str]]:
    """Every move of a task's status: (from, to) -> what makes it.

    Submits, promotions and claims, then each kind of end of ``django_workers.lifecycle``
    from each status it applies in (``FROM_STATUSES``) to each it writes (``TO_STATUSES``).
    """
    from django_workers.lifecycle import FROM_STATUSES, TO_STATUSES

    moves: dict[tuple[str | None, str], list[str]] = {}
    for before, after, why in TASK_STARTS:
        moves.setdefault((before, after), []).append(why)
    for kind, froms in FROM_STATUSES.items():
        for before in sorted(froms, key=_task_order):
            for after in sorted(TO_STATUSES[kind], key=_task_order):
                moves.setdefault((before.value, after.value), []).append(kind.value)
    return moves


def task_diagram() -> str:
    """A Mermaid state diagram of a task's statuses, from ``task_moves``, and a table of the
    kinds of end it names, from the comments of ``lifecycle.EndKind``."""
    from django_workers import lifecycle
    from django_workers.info import TERMINAL_STATUSES

    ends = sorted((status.value for status in TERMINAL_STATUSES), key=_task_order)
    rows = ["| end | what it is |", "|---|---|"]
    for kind, comment in member_comments(Path(lifecycle.__file__), "EndKind").items():
        rows.append(f"| `{lifecycle.EndKind[kind].value}` | {_cell(_rst(comment))} |")
    return _diagram(task_moves(), ends) + "\n\n" + "\n".join(rows)


def member_comments(source: Path, class_name: str) -> dict[str, str]:
    """The ``#:`` comment above each member of a class: name -> comment."""
    lines = source.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.Assign):
                continue
            comment: list[str] = []
            row = statement.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                comment.insert(0, lines[row].strip().removeprefix("#:").strip())
                row -= 1
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = " ".join(comment)
    return found


#: Small plans the machine runs to find its moves: every shape of dependency, .always()
#: and undo that a move depends on.
PLANS: list[list[dict[str, Any]]] = [
    [{"name": "a"}],
    [{"name": "a", "has_undo": True}],
    [{"name": "a", "has_undo": True}, {"name": "b", "deps": ("a",)}],
    [{"name": "a", "has_undo": True}, {"name": "b", "deps": ("a",), "always": True}],
    [{"name": "a", "has_undo": True}, {"name": "b", "has_undo": True}],
    [
        {"name": "a", "has_undo": True},
        {"name": "b", "deps": ("a",), "has_undo": True},
        {"name": "c", "deps": ("a",), "always": True},
    ],
]


@functools.cache
def machine_steps() -> tuple[tuple[Any, Any, str, Any], ...]:
    """Every step the workflow machine takes from a state it reaches on ``PLANS``.

    Each plan runs with every flag, through every event and re-run the machine accepts:
    (state before or None for a submit, event or None, what it is, state after).
    """
    from django_workers.engine import machine
    from django_workers.engine.vocabulary import Node

    steps = []
    for plan in PLANS:
        nodes = [Node(**node) for node in plan]
        for fail_fast in (False, True):
            for undo_on_cancel in (True, False):
                first = machine.start(nodes, fail_fast=fail_fast, undo_on_cancel=undo_on_cancel)
                steps.append((None, None, "submit", first.state))
                seen = {first.state}
                todo = [first.state]
                while todo:
                    state = todo.pop()
                    for why, event, step in _workflow_steps(state):
                        try:
                            after = step().state
                        except ValueError:  # InvalidEvent, or a cancel that would widen
                            continue
                        steps.append((state, event, why, after))
                        if after not in seen:
                            seen.add(after)
                            todo.append(after)
    return tuple(steps)


def workflow_moves() -> dict[tuple[str | None, str], list[str]]:
    """Every change of a workflow's state, as a reader sees it, that the machine makes:
    (from, to) -> the steps that make it (see ``machine_steps``)."""
    moves: dict[tuple[str | None, str], list[str]] = {}
    for before, _event, why, after in machine_steps():
        shown = None if before is None else _shown(before)
        if shown != _shown(after):
            _add(moves, shown, _shown(after), why)
    return moves


def node_moves(undo: bool = False) -> dict[tuple[str | None, str], list[str]]:
    """Every change of a node's state (or of its undo's) that the machine makes."""
    from django_workers.engine.vocabulary import (
        NodeEnded,
        NodeStarted,
        UndoEnded,
        UndoStarted,
    )

    own = (UndoStarted, UndoEnded) if undo else (NodeStarted, NodeEnded)
    moves: dict[tuple[str | None, str], list[str]] = {}
    for before, event, why, after in machine_steps():
        for node in after.nodes:
            if undo and not node.has_undo:
                continue
            now = (node.undo if undo else node.status).value
            if before is None:
                _add(moves, None, now, why)
                continue
            old = before.node(node.name)
            then = (old.undo if undo else old.status).value
            if then == now:
                continue
            if isinstance(event, own) and event.node == node.name:
                why = "it starts" if isinstance(event, own[0]) else "its task ends"
            elif isinstance(event, NodeEnded):
                why = "the nodes end" if undo else "another node ends"
            elif isinstance(event, UndoEnded):
                why = "another undo ends"
            _add(moves, then, now, why)
    return moves


def workflow_diagram() -> str:
    """A Mermaid state diagram of a workflow's states, from ``workflow_moves``."""
    from django_workers.engine.vocabulary import RERUNNABLE, WORKFLOW_ENDS

    # Ends a workflow never leaves; the others may be re-run.
    return _diagram(workflow_moves(), [s.value for s in WORKFLOW_ENDS - RERUNNABLE])


def node_diagram() -> str:
    """A Mermaid state diagram of a workflow node's states, from ``node_moves``."""
    return _diagram(node_moves(), [])


def undo_diagram() -> str:
    """A Mermaid state diagram of the states of a node's undo step, from ``node_moves``."""
    return _diagram(node_moves(undo=True), [])


def _workflow_steps(state: Any) -> list[tuple[str, Any, Any]]:
    from django_workers.engine import machine
    from django_workers.engine.vocabulary import (
        RERUNNABLE,
        CancelWorkflow,
        NodeEnded,
        NodeStarted,
        Outcome,
        UndoEnded,
        UndoStarted,
    )

    events: list[tuple[str, Any]] = []
    for node in state.nodes:
        events.append(("a node starts", NodeStarted(node.name)))
        events += [("the nodes end", NodeEnded(node.name, outcome)) for outcome in Outcome]
        if node.has_undo:
            events.append(("an undo starts", UndoStarted(node.name)))
            events += [("the undo steps end", UndoEnded(node.name, o)) for o in Outcome]
    events += [("cancel", CancelWorkflow(undo)) for undo in (None, True, False)]
    steps: list[tuple[str, Any, Any]] = [
        (why, event, lambda event=event: machine.apply(state, event)) for why, event in events
    ]
    if state.status in RERUNNABLE:
        steps.append(("re-run", None, lambda: machine.rerun(state)))
    return steps


def _shown(state: Any) -> str:
    from django_workers.engine.records import shown_state

    return str(shown_state(state.status.value, state.cancel_undo))


def _add(moves: dict[tuple[str | None, str], list[str]], a: str | None, b: str, why: str) -> None:
    whys = moves.setdefault((a, b), [])
    if why not in whys:
        whys.append(why)


def _task_order(status: Any) -> int:
    from django_workers.info import TaskStatus

    return list(TaskStatus).index(TaskStatus(status))


def _diagram(moves: dict[tuple[str | None, str], list[str]], ends: list[str]) -> str:
    lines = ["```mermaid", "stateDiagram-v2"]
    for (before, after), whys in moves.items():
        lines.append(f"    {before or '[*]'} --> {after}: {', '.join(whys)}")
    lines += [f"    {end} --> [*]" for end in ends]
    return "\n".join([*lines, "```"])


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
