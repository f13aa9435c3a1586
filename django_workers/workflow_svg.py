"""A workflow's DAG as an SVG picture: nodes by depth left to right, coloured by state.

Pure: ``workflow_svg`` reads a ``WorkflowInfo`` and returns markup, with
every name escaped; it reads no model and no setting. A node sits in the
column of its depth (the longest path from a root), its undo step in a small
box under it; each carries a ``<title>`` and text labels, so the picture does
not depend on colour alone. An edge between neighbouring columns is a curve
in the gap between them; a longer one runs in the gaps around the boxes (down
the gap after its start's column, along a lane between two rows, up the gap
before its end's column), so no edge crosses a box. The admin's workflow page shows it; a site may
serve it from its own views.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from django_workers.workflows import UndoInfo, WorkflowInfo, WorkflowNodeInfo

#: Fill and outline of each node, undo and workflow state.
STATE_COLOURS: Final[dict[str, tuple[str, str]]] = {
    "idle": ("#ffffff", "#94a3b8"),
    "waiting": ("#f1f5f9", "#64748b"),
    "pending": ("#fef3c7", "#b45309"),
    "running": ("#dbeafe", "#1d4ed8"),
    "completed": ("#dcfce7", "#15803d"),
    "failed": ("#fee2e2", "#b91c1c"),
    "cancelled": ("#e5e7eb", "#4b5563"),
    "cancelling": ("#f3f4f6", "#4b5563"),
    "compensating": ("#ede9fe", "#6d28d9"),
    "compensated": ("#f3e8ff", "#7e22ce"),
    "compensation_failed": ("#ffe4e6", "#be123c"),
}
#: A state this module does not know (a newer version's) is drawn plainly.
UNKNOWN_COLOURS: Final = ("#ffffff", "#111827")

NODE_WIDTH: Final = 176
NODE_HEIGHT: Final = 46
UNDO_HEIGHT: Final = 22
UNDO_GAP: Final = 8
COLUMN_GAP: Final = 64
ROW_GAP: Final = 22
MARGIN: Final = 12
#: How far edges that share a lane are set apart from its middle, in turn.
LANE_SHIFTS: Final = (0, -6, 6, -3, 3)
#: Longer names are cut in the box; the node's <title> and the page's table hold them whole.
LABEL_CHARS: Final = 21

#: Given a task id, the URL of its page (or None for no link).
TaskUrl = Callable[[str], str | None]


def colours(state: str) -> tuple[str, str]:
    """The fill and outline colours of a state."""
    return STATE_COLOURS.get(state, UNKNOWN_COLOURS)


def depths(nodes: Iterable[WorkflowNodeInfo]) -> dict[str, int]:
    """Each node's depth: 0 for a root, else one more than its deepest dependency."""
    deps = {node.name: node.deps for node in nodes}
    found: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name not in found:
            # A dependency the workflow does not hold, or a cycle, adds no depth.
            known = [d for d in deps[name] if d in deps and d not in seen]
            found[name] = max((depth(d, seen | {d}) + 1 for d in known), default=0)
        return found[name]

    return {name: depth(name, frozenset({name})) for name in deps}


@dataclass(frozen=True, slots=True)
class _Box:
    node: WorkflowNodeInfo
    x: int
    y: int


def workflow_svg(info: WorkflowInfo, task_url: TaskUrl | None = None) -> SafeString:
    """The SVG markup of ``info``'s DAG; ``task_url`` links each node to its task's page."""
    link = task_url or (lambda task_id: None)
    boxes = _layout(info.nodes)
    slot = _slot_height(info.nodes)
    width = max((box.x for box in boxes.values()), default=0) + NODE_WIDTH + MARGIN
    height = max((box.y for box in boxes.values()), default=0) + slot - ROW_GAP + MARGIN
    tag = hashlib.sha256(info.id.encode()).hexdigest()[:10]
    edges, lowest = _edges(boxes, slot, tag)
    # A lane below the last row lies in the bottom margin: make room for it.
    height = max(height, lowest + MARGIN)
    parts = [
        _defs(tag),
        *edges,
        *(_node(box, link) for box in boxes.values()),
    ]
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="dw-dag" role="group" '
        'aria-labelledby="dw-dag-{}" width="{}" height="{}" viewBox="0 0 {} {}" '
        'font-family="sans-serif" font-size="13">'
        '<title id="dw-dag-{}">{}</title>{}</svg>',
        tag,
        width,
        height,
        width,
        height,
        tag,
        _summary(info),
        mark_safe("".join(parts)),  # every part is built by format_html
    )


def _summary(info: WorkflowInfo) -> str:
    count = len(info.nodes)
    return f"Workflow {info.id}: {info.state}, {count} node{'' if count == 1 else 's'}"


def _slot_height(nodes: Iterable[WorkflowNodeInfo]) -> int:
    has_undo = any(node.undo is not None for node in nodes)
    return NODE_HEIGHT + (UNDO_GAP + UNDO_HEIGHT if has_undo else 0) + ROW_GAP


def _layout(nodes: tuple[WorkflowNodeInfo, ...]) -> dict[str, _Box]:
    """Each node's box: its depth's column, then the next free row there, in node order."""
    slot = _slot_height(nodes)
    level = depths(nodes)
    rows: dict[int, int] = {}
    boxes = {}
    for node in nodes:
        column = level[node.name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        boxes[node.name] = _Box(
            node, MARGIN + column * (NODE_WIDTH + COLUMN_GAP), MARGIN + row * slot
        )
    return boxes


def _defs(tag: str) -> str:
    return format_html(
        '<defs><marker id="dw-arrow-{}" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#64748b"/></marker></defs>',
        tag,
    )


def _edges(boxes: dict[str, _Box], slot: int, tag: str) -> tuple[list[str], int]:
    """One line per dependency, right side of the dependency to the left of the node.

    Also answers the lowest y an edge reaches.
    """
    edges: list[str] = []
    lowest = 0
    rows = _lanes(boxes, slot)
    used: dict[int, int] = {}
    for box in boxes.values():
        for dep in box.node.deps:
            start = boxes.get(dep)
            if start is None:
                continue
            x1, y1 = start.x + NODE_WIDTH, start.y + NODE_HEIGHT // 2
            x2, y2 = box.x, box.y + NODE_HEIGHT // 2
            bend = COLUMN_GAP // 2
            if x2 - x1 <= COLUMN_GAP:
                # Neighbouring columns: a curve that stays in the gap between them.
                d = f"M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}"
            else:
                lane = min(rows, key=lambda y: (abs(y - y1) + abs(y - y2), y))
                # Edges sharing a lane are set a little apart, so each can be followed.
                shift = LANE_SHIFTS[used.get(lane, 0) % len(LANE_SHIFTS)]
                used[lane] = used.get(lane, 0) + 1
                y = lane + shift
                lowest = max(lowest, y)
                d = (
                    f"M {x1} {y1} L {x1 + bend} {y1} L {x1 + bend} {y} L {x2 - bend} {y} "
                    f"L {x2 - bend} {y2} L {x2} {y2}"
                )
            edges.append(
                format_html(
                    '<path class="dw-edge" data-from="{}" data-to="{}" d="{}" fill="none" '
                    'stroke="#64748b" stroke-width="1.5"{} marker-end="url(#dw-arrow-{})"/>',
                    dep,
                    box.node.name,
                    d,
                    # An .always() node runs whatever its dependencies did: a dashed line.
                    mark_safe(' stroke-dasharray="5 3"') if box.node.always else "",
                    tag,
                )
            )
    return edges, lowest


def _lanes(boxes: dict[str, _Box], slot: int) -> list[int]:
    """The y of each lane: the middle of the gap below each row, in every column alike."""
    rows = max((box.y for box in boxes.values()), default=MARGIN) - MARGIN
    return [MARGIN + row * slot + slot - ROW_GAP // 2 for row in range(rows // slot + 1)]


def _node(box: _Box, link: TaskUrl) -> str:
    node = box.node
    fill, stroke = colours(node.state)
    second = f"{node.state} · always" if node.always else node.state
    shape = format_html(
        '<g class="dw-node dw-state-{}" data-node="{}" data-state="{}"><title>{}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}" stroke="{}" '
        'stroke-width="2"{}/>'
        '<text x="{}" y="{}" font-weight="bold" fill="#111827">{}</text>'
        '<text x="{}" y="{}" fill="#374151">{}</text></g>',
        node.state,
        node.name,
        node.state,
        _node_title(node),
        box.x,
        box.y,
        NODE_WIDTH,
        NODE_HEIGHT,
        fill,
        stroke,
        mark_safe(' stroke-dasharray="4 3"') if node.state == "cancelled" else "",
        box.x + 10,
        box.y + 19,
        _cut(node.name),
        box.x + 10,
        box.y + 36,
        second,
    )
    parts = [_linked(shape, link(node.task_id), f"Task of node {node.name}")]
    if node.undo is not None:
        parts.append(_undo(box, node.undo, link))
    return "".join(parts)


def _undo(box: _Box, undo: UndoInfo, link: TaskUrl) -> str:
    fill, stroke = colours(undo.state)
    top = box.y + NODE_HEIGHT + UNDO_GAP
    name = box.node.name
    shape = format_html(
        '<g class="dw-undo dw-state-{}" data-node="{}" data-state="{}"><title>{}</title>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#64748b" stroke-dasharray="2 2"/>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="{}" stroke="{}"/>'
        '<text x="{}" y="{}" font-size="11" fill="#374151">undo: {}</text></g>',
        undo.state,
        name,
        undo.state,
        _undo_title(name, undo),
        box.x + 24,
        box.y + NODE_HEIGHT,
        box.x + 24,
        top,
        box.x + 14,
        top,
        NODE_WIDTH - 28,
        UNDO_HEIGHT,
        fill,
        stroke,
        box.x + 22,
        top + 15,
        undo.state,
    )
    url = link(undo.task_id) if undo.task_id else None
    return _linked(shape, url, f"Undo task of node {name}")


def _linked(shape: str, url: str | None, label: str) -> str:
    if not url:
        return shape
    return format_html('<a href="{}" aria-label="{}">{}</a>', url, label, shape)


def _node_title(node: WorkflowNodeInfo) -> str:
    lines = [f"{node.name}: {node.state}", f"queue: {node.queue}"]
    if node.deps:
        lines.append(f"after: {', '.join(node.deps)}{' (always)' if node.always else ''}")
    if node.reason:
        lines.append(f"reason: {node.reason}")
    if node.result_size is not None:
        lines.append(f"result: {node.result_size} bytes")
    return "\n".join(lines)


def _undo_title(name: str, undo: UndoInfo) -> str:
    lines = [f"undo of {name}: {undo.state}", f"task: {undo.task_path}", f"queue: {undo.queue}"]
    if undo.reason:
        lines.append(f"reason: {undo.reason}")
    return "\n".join(lines)


def _cut(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"
