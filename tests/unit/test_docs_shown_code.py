"""A page that uses the example project's code shows that code, exactly as it is.

The docs run examples that import the example project's tasks
(``from shop.tasks import charge_card``). A reader who tries them in a project
of their own must see those tasks on the same page. The convention: a Python
block whose first line is a comment naming a file of the example project,

    <!-- skip: next -->
    ```python
    # example_project/shop/tasks.py
    def charge_card(order_id: int, outage_attempts: int) -> str:
        ...
    ```

shows code copied from that file. These tests check that

- every top-level function, class (decorators included) and assignment in
  such a block is the same, by AST, as the one in the file it names;
- such a block is not run (it is preceded by ``<!-- skip: next -->``);
- every name a page imports with ``from shop.<module> import <name>`` is shown
  in such a block on that page, before the block that first imports it.

docs/tutorial.md is exempt: it builds a project of its own and shows all of it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The pages Sybil runs (conftest.py), but for the tutorial.
PAGES = [ROOT / "README.md"] + [
    p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "tutorial.md"
]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*$")
SHOWN = re.compile(r"^#\s*(?P<path>example_project/\S+\.py)\s*$")
SKIP_NEXT = "<!-- skip: next -->"
HOW_TO_SHOW = (
    "Put a block like this on the page before it (copied exactly from the file):\n\n"
    "    <!-- skip: next -->\n"
    "    ```python\n"
    "    # example_project/shop/{module}.py\n"
    "    <the imports it needs>\n\n"
    "    <the function or class {name}, with its decorators>\n"
    "    ```"
)


@dataclass
class Block:
    """One fenced ```python block of a page."""

    page: str
    line: int  # of the opening fence, counted from 1
    source: str
    skipped: bool

    @property
    def shown_path(self) -> str | None:
        """The example project file this block shows, if its first line names one."""
        first = self.source.lstrip("\n").split("\n", 1)[0]
        match = SHOWN.match(first.strip())
        return match["path"] if match else None

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The fenced Python blocks of a markdown page, in order."""
    lines = page.read_text().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent = opening["indent"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if opening["lang"] == "python":
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[i + 1 : end]
            ]
            previous = next(
                (lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), ""
            )
            blocks.append(
                Block(
                    page=str(page.relative_to(ROOT) if page.is_relative_to(ROOT) else page),
                    line=i + 1,
                    source="\n".join(body) + "\n",
                    skipped=previous == SKIP_NEXT,
                )
            )
        i = end + 1
    return blocks


def top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    """The functions, classes and simply named assignments at the top of a module."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for target in node.targets:
                found[target.id] = node  # type: ignore[attr-defined]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
    return found


def shop_imports(block: Block) -> list[tuple[str, str, int]]:
    """``(module, name, page line)`` for each ``from shop.<module> import <name>`` of a block."""
    try:
        tree = ast.parse(block.source)
    except SyntaxError:  # not Python as a whole: read the import lines alone
        found = []
        for number, line in enumerate(block.source.split("\n"), start=block.line + 1):
            match = re.match(r"\s*from shop\.([\w.]+) import \(?([\w, ]+)", line)
            if match:
                names = (name.strip().split(" as ")[0] for name in match[2].split(","))
                found += [(match[1], name, number) for name in names if name]
        return found
    return [
        (node.module.removeprefix("shop."), alias.name, block.line + node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shop.")
        for alias in node.names
    ]


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in python_blocks(page)]


def shown_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.shown_path]


def page_imports() -> list[tuple[str, str, str]]:
    """``(page, module, name)``: each name a page imports from the example project's shop."""
    found: dict[tuple[str, str, str], None] = {}
    for block in all_blocks():
        for module, name, _line in shop_imports(block):
            found[(block.page, module, name)] = None
    return list(found)


def test_the_pages_show_code_and_import_it() -> None:
    """The checks below have something to check: a page that does neither passes them all."""
    assert shown_blocks(), "no page shows a block starting '# example_project/...'"
    assert page_imports(), "no page imports from shop.<module>"


@pytest.mark.parametrize("block", shown_blocks(), ids=Block.where)
def test_shown_code_is_the_files_code(block: Block) -> None:
    assert block.shown_path is not None
    path = ROOT / block.shown_path
    assert path.is_file(), (
        f"{block.where()}: the block names {block.shown_path}, which does not exist"
    )
    try:
        shown = ast.parse(block.source)
    except SyntaxError as error:
        pytest.fail(
            f"{block.where()}: the block showing {block.shown_path} is not valid Python: {error}"
        )
    real = top_level(ast.parse(path.read_text()))
    shown_defs = top_level(shown)
    assert shown_defs, (
        f"{block.where()}: the block names {block.shown_path} but defines nothing of it"
    )
    for name, node in shown_defs.items():
        assert name in real, (
            f"{block.where()} shows {name!r} as code of {block.shown_path}, "
            f"which has no top-level {name!r}: show only code that is in the file, "
            f"or name the file it comes from on the block's first line"
        )
        assert ast.dump(node) == ast.dump(real[name]), (
            f"{block.where()} shows {name!r} differently from {block.shown_path} "
            f"(decorators, signature, docstring or body differ): copy it again from the file"
        )


@pytest.mark.parametrize("block", shown_blocks(), ids=Block.where)
def test_shown_code_is_not_run(block: Block) -> None:
    assert block.skipped, (
        f"{block.where()} shows {block.shown_path} but would be run as a test: "
        f"put '{SKIP_NEXT}' on the line before its opening ```python"
    )


@pytest.mark.parametrize(("page", "module", "name"), page_imports(), ids=lambda value: str(value))
def test_an_imported_name_is_shown_before_its_use(page: str, module: str, name: str) -> None:
    blocks = [block for block in all_blocks() if block.page == page]
    first_use, line = next(
        (block, line)
        for block in blocks
        for (m, n, line) in shop_imports(block)
        if (m, n) == (module, name)
    )
    wanted = f"example_project/shop/{module.replace('.', '/')}.py"
    shown_before = [
        block
        for block in blocks
        if block.line < first_use.line
        and block.shown_path == wanted
        and name in top_level(ast.parse(block.source))
    ]
    assert shown_before, (
        f"{page}:{line} imports {name!r} from shop.{module}, but the page does not show it "
        f"before then, so a reader cannot run the example in a project of their own.\n"
        + HOW_TO_SHOW.format(module=module, name=name)
    )


def test_the_checker_reads_a_page_as_the_docs_write_it(tmp_path: Path) -> None:
    """A shown copy that changed is told apart from the file's code; an import is found."""
    real = top_level(ast.parse((ROOT / "example_project/shop/tasks.py").read_text()))
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- skip: next -->\n```python\n# example_project/shop/tasks.py\n"
        "def refund_card(order_id: int) -> str:\n"
        '    """Give back what ``charge_card`` took: the compensation step of a charge."""\n'
        '    return f"order {order_id} refunded"  # a comment is not code\n```\n\n'
        "- An item:\n\n  ```python\n  # example_project/shop/tasks.py\n"
        "  def refund_card(order_id: int) -> str:\n"
        '      return f"order {order_id} refunded"\n  ```\n\n'
        "```python\nfrom shop.tasks import refund_card, send_receipt as receipt\n```\n"
    )
    exact, changed, use = python_blocks(page)
    assert (exact.skipped, changed.skipped, use.skipped) == (True, False, False)
    assert exact.shown_path == changed.shown_path == "example_project/shop/tasks.py"
    assert use.shown_path is None
    assert ast.dump(top_level(ast.parse(exact.source))["refund_card"]) == ast.dump(
        real["refund_card"]
    )
    assert ast.dump(top_level(ast.parse(changed.source))["refund_card"]) != ast.dump(
        real["refund_card"]
    )
    assert shop_imports(use) == [("tasks", "refund_card", 20), ("tasks", "send_receipt", 20)]
