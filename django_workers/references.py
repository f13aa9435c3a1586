"""Tasks by dotted path, and arguments and results as JSON.

A worker in another process finds a task by importing its dotted path, so
only module-level functions (plain, or Django ``@task`` objects) qualify.
Only tasks run: a path is imported only if its module belongs to an
installed app or to a prefix of ``DJANGO_WORKERS["TASK_MODULES"]``, decided
on the path alone; what it names must then be a Django ``Task`` (which a
``django_workers.task`` function is) or a function defined in such a
module (in Django's own apps and this one, a Task only). A record that
names ``os.system`` is refused without importing anything. Values cross the
database as JSON; anything else is refused before a write.
"""

from __future__ import annotations

import functools
import inspect
import json
import reprlib
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from json.encoder import encode_basestring_ascii as _json_string
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.tasks import Task
from django.utils.module_loading import import_string

from django_workers.bounds import TASK_PATH_MAX_LENGTH
from django_workers.conf import workers_settings
from django_workers.exceptions import ArgumentsNotSerializable, TaskNotAllowed, TaskNotImportable

if TYPE_CHECKING:
    from django_workers.options import TaskOptions

#: A task as callers name it: its dotted path, its function, or its Django Task.
type TaskRef = str | Callable[..., Any] | Task[..., Any]


def task_path(task: TaskRef) -> str:
    """Return the dotted path a worker imports to run ``task``, or raise TaskNotImportable."""
    return task_reference(task)[0]


def task_reference(task: TaskRef) -> tuple[str, TaskOptions | None]:
    """``task_path``, and the options ``django_workers.task`` declared for the task (or None)."""
    try:
        hash(task)
    except TypeError:
        return _task_reference(task)
    # Cached: a bulk submit of one task checks its importability once, not per record.
    return _cached_task_reference(task)


def declared_options(target: object) -> TaskOptions | None:
    """The defaults ``django_workers.task`` gave a task (a Task or its function), or None."""
    func = target.func if isinstance(target, Task) else target
    return getattr(func, DECLARED_OPTIONS, None)


#: The attribute ``django_workers.task`` sets on a function: its TaskOptions.
DECLARED_OPTIONS = "django_workers_options"


def _task_reference(task: TaskRef) -> tuple[str, TaskOptions | None]:
    if isinstance(task, str):
        return task, declared_options(resolve(task))
    return _task_path(task), declared_options(task)


def _task_path(task: TaskRef) -> str:
    if isinstance(task, Task):
        func = task.func
        path = task.module_path
    elif callable(task):
        func = task
        path = f"{getattr(task, '__module__', '?')}.{getattr(task, '__qualname__', '?')}"
    else:
        raise TaskNotImportable(
            f"A task must be a module-level function, a Django @task, or a dotted path; "
            f"got {type(task).__name__}."
        )
    _refuse_unimportable(func, path)
    return path


_cached_task_reference = functools.lru_cache(maxsize=1024)(_task_reference)


def _refuse_unimportable(func: Callable[..., Any], path: str) -> None:
    if inspect.ismethod(func):
        raise TaskNotImportable(
            f"{path} is a bound method; a worker cannot rebuild its instance. "
            "Use a module-level function and pass the data it needs as arguments."
        )
    name = getattr(func, "__qualname__", "")
    if name == "<lambda>" or "<lambda>" in name:
        raise TaskNotImportable(
            "A lambda has no importable name; define the task as a module-level function."
        )
    if "<locals>" in name:
        raise TaskNotImportable(
            f"{path} is defined inside another function (a closure); a worker cannot import "
            "it. Move it to module level and pass captured values as arguments."
        )
    target = resolve(path)
    if target is not func and getattr(target, "func", None) is not func:
        raise TaskNotImportable(
            f"{path} does not import back to this function (is it shadowed or decorated?); "
            "submit the module-level object itself."
        )


def resolve(path: str) -> Callable[..., Any] | Task[..., Any]:
    """Import a task by dotted path: a function or a Django Task, else TaskNotImportable.

    TaskNotAllowed, before anything is imported, for a path outside the modules
    tasks may live in; and after, for one that names no task of those modules.
    """
    known = _allowed_targets.get(path) if isinstance(path, str) else None
    if known is not None and _import(path) is known:
        return known  # every run resolves its task: the verdict on a path is kept
    _check_path(path)
    module = path.rpartition(".")[0]
    if not module_allowed(module):
        raise TaskNotAllowed(
            f"{path!r} is not in a module a worker may run tasks from: an installed app's "
            "package, or a module prefix listed in DJANGO_WORKERS['TASK_MODULES']. Define "
            "the task in an app's tasks.py, or add its module (or a prefix of it) to "
            "TASK_MODULES."
        )
    try:
        target: object = _import(path)
    except ImportError as e:
        raise TaskNotImportable(
            f"Cannot import task {path!r}: {e}. Give the full dotted path of a module-level "
            "function, e.g. 'myapp.tasks.send_report'. A process imports task code once: "
            "if the task is new, restart the workers (and the shell) that run or submit it."
        ) from e
    if not callable(target) and not isinstance(target, Task):
        raise TaskNotImportable(f"{path!r} imports a {type(target).__name__}, not a function.")
    if not _is_task(target):
        raise TaskNotAllowed(
            f"{path!r} names a {type(target).__name__} from {_origin(target)!r}, which is no "
            "task: a worker runs a Django @task, a @django_workers.task function, or a "
            "function defined in an installed app or TASK_MODULES. Submit the function where "
            "it is defined, or declare it with @django_workers.task there."
        )
    if len(_allowed_targets) >= _ALLOWED_TARGETS_MAX:
        _allowed_targets.clear()
    _allowed_targets[path] = target
    return target


#: Paths ``resolve`` allowed, with what each imported to: a path whose import still
#: gives that object is allowed again without its checks. Cleared when the settings
#: that decide it change, and when full (a site has far fewer task paths).
_allowed_targets: dict[str, Callable[..., Any] | Task[..., Any]] = {}
_ALLOWED_TARGETS_MAX = 4096


#: Installed apps whose plain functions are no tasks: Django's own and this app's. Their
#: modules hold functions such as password or retry helpers that no record may call.
FRAMEWORK_PACKAGES = ("django", "django_workers")


def _is_task(target: object) -> bool:
    """Whether a worker may call ``target``: a Task, or a function defined where tasks live."""
    if isinstance(target, Task):
        return True
    return inspect.isfunction(target) and functions_are_tasks(_origin(target))


@functools.lru_cache(maxsize=1024)
def functions_are_tasks(module: str) -> bool:
    """Whether a plain function of ``module`` may run as a task.

    Those of an installed app's modules and of TASK_MODULES may; in Django's and
    this app's own packages only a Task does, unless TASK_MODULES lists the module.
    """
    listed = workers_settings.TASK_MODULES
    prefixes = [p for p in listed if isinstance(p, str)] if isinstance(listed, list | tuple) else []
    if any(module == p or module.startswith(f"{p}.") for p in prefixes):
        return True
    if any(module == p or module.startswith(f"{p}.") for p in FRAMEWORK_PACKAGES):
        return False
    return module_allowed(module)


def _origin(target: object) -> str:
    return str(getattr(target, "__module__", None) or "?")


@functools.lru_cache(maxsize=1024)  # asked at every run's start
def module_allowed(module: str) -> bool:
    """Whether tasks may live in ``module``: an installed app's, or under TASK_MODULES."""
    prefixes = _task_prefixes()
    return module in prefixes or any(module.startswith(f"{p}.") for p in prefixes)


@functools.cache
def _task_prefixes() -> frozenset[str]:
    listed = workers_settings.TASK_MODULES
    extra = [p for p in listed if isinstance(p, str)] if isinstance(listed, list | tuple) else []
    return frozenset([config.name for config in apps.get_app_configs()] + extra)


@receiver(setting_changed)
def _forget_task_prefixes(*, setting: str, **kwargs: Any) -> None:
    if setting in ("INSTALLED_APPS", "DJANGO_WORKERS"):
        _task_prefixes.cache_clear()
        module_allowed.cache_clear()
        functions_are_tasks.cache_clear()
        _cached_task_reference.cache_clear()
        _allowed_targets.clear()


#: Shows a refused value in a message without repeating all of a long one.
_SHORT = reprlib.Repr(maxstring=80, maxother=80)


def _check_path(path: object) -> None:
    if not isinstance(path, str) or not _is_task_path(path):
        raise TaskNotImportable(
            f"A task path is Python names joined by dots (module, then function), at most "
            f"{TASK_PATH_MAX_LENGTH} characters, e.g. 'myapp.tasks.send_report'; got "
            f"{_SHORT.repr(path)}."
        )


@functools.lru_cache(maxsize=1024)  # every run resolves its task's path: once a path
def _is_task_path(path: str) -> bool:
    return (
        3 <= len(path) <= TASK_PATH_MAX_LENGTH
        and "." in path
        and all(part.isidentifier() for part in path.split("."))
    )


def _import(path: str) -> Any:
    """``import_string(path)``, its modules imported parent first.

    Importing ``a.b.c`` imports ``a.b`` from within, and that ``a``: a path of
    many parts, none yet imported, would recurse once a part. Parents first,
    every import finds its parent done.
    """
    module = path.rpartition(".")[0]
    if module not in sys.modules:
        parts = module.split(".")
        for end in range(1, len(parts)):
            import_module(".".join(parts[:end]))
    return import_string(path)


def to_json(value: Any, what: str) -> Any:
    """Return ``value`` as it reads back from JSON, or raise ArgumentsNotSerializable."""
    return to_sized_json(value, what)[0]


def to_sized_json(value: Any, what: str) -> tuple[Any, int]:
    """``to_json``, and the bytes of the JSON it produced (ASCII: one byte a character)."""
    loaded, text = to_json_text(value, what)
    return loaded, len(text)


#: One encoder for every call (its settings never change; each encode keeps its own state).
_ENCODER = DjangoJSONEncoder(allow_nan=False)


def to_json_text(value: Any, what: str) -> tuple[Any, str]:
    """``to_json``, and the JSON text it produced: what a writer stores, ASCII only."""
    if value is None:  # what most tasks return
        return None, "null"
    try:
        return _checked_json(value, what)
    except RecursionError:
        raise ArgumentsNotSerializable(
            f"{what} is nested too deeply to store as JSON; pass flatter data."
        ) from None


def _checked_json(value: Any, what: str) -> tuple[Any, str]:
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as e:
        raise ArgumentsNotSerializable(
            f"{what} must be JSON-serializable (Django's DjangoJSONEncoder range: str, numbers, "
            f"bool, None, lists, dicts with string keys, dates, UUIDs, Decimals): {e}. Pass ids "
            "or plain data instead of objects."
        ) from e
    loaded = _flat_copy(value)
    if loaded is None:
        loaded = json.loads(text)
    # The substring tests are cheap; the walks rule out an escaped backslash before "u".
    if "\\u0000" in text and _has_nul(loaded):
        raise ArgumentsNotSerializable(
            f"{what} contains a NUL character (\\u0000), which PostgreSQL cannot store in "
            "JSON; remove it or encode the data (e.g. base64) first."
        )
    if "\\ud" in text and _has_lone_surrogate(loaded):
        raise ArgumentsNotSerializable(
            f"{what} contains a lone surrogate (a character from \\ud800 to \\udfff, not "
            "part of a pair), which is no Unicode text and which PostgreSQL and MySQL cannot "
            "store; decode bytes with errors='replace', or encode the data (e.g. base64) first."
        )
    return loaded, text


#: The types of values ``ids_and_names_json`` writes.
_STR_INT = frozenset({str, int})


def ids_and_names_json(values: Sequence[Any]) -> str | None:
    """``to_json_text``'s text for a list of ``str`` and ``int`` alone, else None.

    Most tasks take ids and names. Their JSON is written here as the encoder would
    write it, without its steps of Python: on an idle machine, whose caches no longer
    hold the encoder's code, they were a fifth of a single submit's time before its
    statement. None for any other value, a NUL character, or an int too long to
    write: ``to_json_text`` then decides, and says what is wrong.
    """
    if not {type(v) for v in values} <= _STR_INT:
        return None
    try:
        text = f"[{', '.join([_json_string(v) if type(v) is str else str(v) for v in values])}]"
    except ValueError:
        return None
    return None if "\\u0000" in text or "\\ud" in text else text


#: The types JSON gives back as they went in (exactly these: a subclass may encode otherwise).
JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat_copy(value: Any) -> list[Any] | dict[str, Any] | None:
    """What a list, or a dict with string keys, of JSON scalars alone reads back as: a copy.

    None for anything else, whose JSON must be parsed to know.
    """
    if type(value) is list and all(type(item) in JSON_SCALARS for item in value):
        return list(value)
    if type(value) is dict and all(
        type(k) is str and type(v) in JSON_SCALARS for k, v in value.items()
    ):
        return dict(value)
    return None


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    return False


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def json_size(value: Any) -> int:
    """Bytes of ``value`` encoded as stored JSON (UTF-8)."""
    return len(json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False).encode())
