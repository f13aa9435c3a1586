"""docs/tutorial.md, followed to the letter in a new project in a temporary folder.

The page's blocks run in order, as a reader runs them:

- ``sh``: each line runs in the project folder, with this suite's virtualenv first on
  PATH. The virtualenv lines (``python -m venv``, ``source``) are the one thing not
  repeated: this virtualenv stands in for the reader's, and ``pip install NAME`` checks
  that NAME is installed in it. ``runworkers`` and ``runserver`` start in the background
  (a reader's second and third terminal) and are restarted where the page runs them
  again; ``runserver`` gets a free port instead of 8000.
- ``python`` with ``title="PATH"``: the file is written, or appended to where the block
  follows ``<!-- tutorial: append -->``.
- ``pycon``: one ``manage.py shell`` session, checked as a doctest.
- ``text`` and ``json``: output shown to the reader; the checks below look at what
  matters in it (a task that completed, a workflow step that failed).

The last part moves the project to PostgreSQL: the database the page names gets a
unique name here, and is dropped at the end.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    # The tutorial makes its own SQLite and PostgreSQL databases: one run is enough.
    pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")),
        reason="the tutorial test runs once, in the SQLite run; it uses PostgreSQL itself",
    ),
]

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "tutorial.md"
BIN = Path(sys.executable).parent
PG_URL = urlsplit(os.environ.get("WORKERS_PG_URL", "postgres://postgres@127.0.0.1:5432/test"))

BLOCK = re.compile(
    r"(?P<marker><!-- tutorial: append -->\n)?"
    r"^```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)

#: Runs the doctest of one pycon block (stdin) in `manage.py shell`, as a reader would type it.
DOCTEST = """
import doctest, sys
test = doctest.DocTestParser().get_doctest(sys.stdin.read(), {}, "tutorial", "tutorial.md", 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
runner.run(test, out=sys.stdout.write)
sys.exit(1 if runner.failures else 0)
"""


@dataclass
class Block:
    lang: str
    body: str
    title: str | None
    append: bool


def blocks() -> list[Block]:
    found = []
    for match in BLOCK.finditer(PAGE.read_text()):
        title = re.search(r'title="([^"]+)"', match.group("info"))
        found.append(
            Block(
                lang=match.group("lang"),
                body=match.group("body"),
                title=title.group(1) if title else None,
                append=bool(match.group("marker")),
            )
        )
    return found


@dataclass
class Reader:
    """The reader's terminals: the project folder, and the processes left running."""

    folder: Path
    database: str
    port: int
    env: dict[str, str]
    background: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    on_postgres: bool = False

    def run(self, line: str, timeout: float = 60) -> str:
        done = subprocess.run(
            line,
            shell=True,
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{line!r} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def start(self, name: str, command: list[str], ready: str) -> str:
        """Start a background process (stopping the one before, with Ctrl-C); its output."""
        self.stop(name)
        started = len(list(self.folder.parent.glob(f"{name}-*.log")))
        log = self.folder.parent / f"{name}-{started}.log"
        self.logs[name] = log
        with log.open("w") as out:
            self.background[name] = subprocess.Popen(
                command, cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while ready not in log.read_text():
            assert self.background[name].poll() is None, f"{name} exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, (
                f"{name} did not print {ready!r}:\n{log.read_text()}"
            )
            time.sleep(0.1)
        return log.read_text()

    def stop(self, name: str) -> None:
        """Ctrl-C: running tasks are asked to stop, and the process exits cleanly."""
        process = self.background.pop(name, None)
        if process is None:
            return
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=40)
        assert code == 0, f"{name} exited {code} after Ctrl-C:\n{self.logs[name].read_text()}"

    def stop_all(self) -> None:
        for process in self.background.values():
            process.kill()
            process.wait()
        self.background.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def signed_in(base: str, username: str, password: str) -> urllib.request.OpenerDirector:
    """A browser signed in to the admin at ``base``, as the page tells the reader to."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    with browser.open(f"{base}/admin/", timeout=10) as answer:
        assert answer.url == f"{base}/admin/login/?next=/admin/"  # it asks to sign in first
        form = answer.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token, form
    fields = {"csrfmiddlewaretoken": token.group(1), "username": username, "password": password}
    data = urllib.parse.urlencode({**fields, "next": "/admin/"}).encode()
    with browser.open(f"{base}/admin/login/?next=/admin/", data=data, timeout=10) as answer:
        assert answer.url == f"{base}/admin/", "the sign-in was refused"
        assert "Workers" in answer.read().decode()
    return browser


def to_postgres(text: str, database: str) -> str:
    """The page's PostgreSQL server and database, as this machine has them."""
    host, port, user = PG_URL.hostname or "127.0.0.1", PG_URL.port or 5432, PG_URL.username
    text = text.replace(
        "-h 127.0.0.1 -U postgres mysite", f"-h {host} -p {port} -U {user} {database}"
    )
    text = text.replace('"NAME": "mysite"', f'"NAME": "{database}"')
    text = text.replace('"HOST": "127.0.0.1"', f'"HOST": "{host}"')
    text = text.replace('"PORT": 5432', f'"PORT": {port}')
    text = text.replace('"USER": "postgres"', f'"USER": "{user}"')
    if PG_URL.password:
        text = text.replace('"PORT"', f'"PASSWORD": "{PG_URL.password}",\n        "PORT"', 1)
    return text


def run_line(reader: Reader, line: str) -> None:
    if line in ("python -m venv .venv", "source .venv/bin/activate"):
        return  # this suite's virtualenv is the reader's
    if line.startswith("pip install "):
        for name in re.findall(
            r'"?([A-Za-z][\w.-]*)(?:\[[^\]]*\])?"?', line[len("pip install ") :]
        ):
            assert importlib.metadata.version(name), f"{name} is not installed"
        return
    if line.startswith("createdb "):
        reader.on_postgres = True
        reader.run(to_postgres(line, reader.database))
        return
    if line == "python manage.py runworkers":
        banner = reader.start("runworkers", line.split(), "wake-up:")
        if reader.on_postgres:
            assert "wake-up:     LISTEN/NOTIFY" in banner
        else:
            assert f"wake-up:     same-host socket in {reader.folder}/db.sqlite3.wake," in banner
            assert (reader.folder / "db.sqlite3.wake").is_dir()
        return
    if line == "python manage.py runserver":
        command = [*line.split(), "--noreload", f"127.0.0.1:{reader.port}"]
        reader.start("runserver", command, "Quit the server with")
        return
    if line.startswith("curl "):
        answer = reader.run(line.replace("127.0.0.1:8000", f"127.0.0.1:{reader.port}"))
        check_curl(answer)
        return
    if line == "python manage.py workers schedules":
        # The page says to wait five seconds or so: a tick's task has completed by then.
        def completed_tick() -> str | None:
            out = reader.run(line)
            return out if "COMPLETED" in out else None

        out = wait_until(completed_tick, timeout=20.0, interval=0.1)
        assert re.search(
            r"^heartbeat\s+shop\.tasks\.heartbeat\s+every 5 s\s+latest\s+enabled", out, re.MULTILINE
        ), out
        return
    reader.run(line)


def check_curl(answer: str) -> None:
    failed = json.loads(answer)["results"]
    assert [task["id"] for task in failed] == ["1::order-2:ship"]
    assert failed[0]["error"]["message"] == "order 2 has no delivery address"
    assert failed[0]["workflow"] == "1::order-2"


def check_admin(reader: Reader) -> None:
    """Signed in as ann, the admin lists the tutorial's tasks, workflows and schedule."""
    base = f"http://127.0.0.1:{reader.port}"
    browser = signed_in(base, "ann", "tutorial")
    pages = {
        "taskrecord": ["export-200", "receipt-7", "schedule:heartbeat:"],
        "workflowrecord": ["order-1", "order-2"],
        "schedulerecord": ["heartbeat"],
    }
    for model, expected in pages.items():
        with browser.open(f"{base}/admin/django_workers/{model}/", timeout=10) as answer:
            page = answer.read().decode()
        for text in expected:
            assert text in page, f"{text!r} is not on the admin's {model} list"


def run_block(reader: Reader, block: Block) -> None:
    if block.lang == "sh":
        for line in block.body.splitlines():
            if line.strip() and not line.startswith("#"):
                run_line(reader, line.strip())
        if "runserver" in block.body:
            check_admin(reader)
    elif block.lang == "python":
        assert block.title, "a python block of the tutorial names its file"
        path = reader.folder / block.title
        text = (
            to_postgres(block.body, reader.database) if "postgresql" in block.body else block.body
        )
        if block.append:
            assert path.exists(), f"the page appends to {block.title}, which does not exist"
            text = path.read_text() + "\n\n" + text
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    elif block.lang == "pycon":
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", DOCTEST],
            input=block.body,
            cwd=reader.folder,
            env=reader.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"the shell session failed:\n{done.stdout}\n{done.stderr}"
    else:
        assert block.lang in ("text", "json"), f"unknown block language {block.lang!r}"


@pytest.fixture
def reader() -> Iterator[Reader]:
    # Not under pytest's tmp_path: the wake-up socket's path must fit in 107 bytes.
    outside = Path(tempfile.mkdtemp(prefix="workers-tutorial-"))
    folder = outside / "tutorial"
    folder.mkdir()  # the empty folder the page starts in
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    env["PYTHONUNBUFFERED"] = "1"
    if PG_URL.password:
        env["PGPASSWORD"] = PG_URL.password
    reader = Reader(folder, f"tutorial_{uuid.uuid4().hex[:12]}", free_port(), env)
    try:
        yield reader
    finally:
        reader.stop_all()
        shutil.rmtree(outside, ignore_errors=True)
        if reader.on_postgres:
            host, port, user = PG_URL.hostname, PG_URL.port or 5432, PG_URL.username
            subprocess.run(
                [
                    *("dropdb", "--if-exists", "--force", "-h", str(host), "-p", str(port)),
                    *("-U", str(user), reader.database),
                ],
                env=env,
                capture_output=True,
                timeout=60,
            )


def test_the_tutorial_runs_as_written(reader: Reader) -> None:
    page = blocks()
    assert [b.lang for b in page].count("pycon") >= 5
    for block in page:
        run_block(reader, block)
    assert reader.on_postgres, "the tutorial ends on PostgreSQL"
    # What the worker logged for the retried task, as the page shows it.
    logs = "".join(log.read_text() for log in reader.folder.parent.glob("runworkers-*.log"))
    assert "Task 1::receipt-7 attempt 1 of 4 failed after" in logs
    assert "(builtins.ConnectionError: the mail server did not answer); retrying in" in logs
    assert "Task 1::receipt-7 completed in" in logs
    reader.stop("runworkers")
