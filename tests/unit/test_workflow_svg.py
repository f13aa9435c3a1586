"""The DAG picture: layout by depth, a colour and a title per state, everything escaped."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from xml.etree import ElementTree

from django_workers.workflow_svg import (
    COLUMN_GAP,
    MARGIN,
    NODE_WIDTH,
    STATE_COLOURS,
    UNKNOWN_COLOURS,
    colours,
    depths,
    workflow_svg,
)
from django_workers.workflows import UndoInfo, WorkflowInfo, WorkflowNodeInfo

SVG = "{http://www.w3.org/2000/svg}"


def node(name: str, state: str = "waiting", *deps: str, **fields: object) -> WorkflowNodeInfo:
    return WorkflowNodeInfo(
        name=name,
        state=state,
        deps=deps,
        always=bool(fields.pop("always", False)),
        queue=str(fields.pop("queue", "default")),
        task_id=f"42::wf:{name}",
        **fields,  # type: ignore[arg-type]
    )


def workflow(*nodes: WorkflowNodeInfo, state: str = "running") -> WorkflowInfo:
    return WorkflowInfo(
        id="42::wf",
        key="wf",
        owner="42",
        state=state,
        fail_fast=False,
        undo_on_cancel=True,
        plan_hash="0" * 64,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        finished_at=None,
        nodes=nodes,
    )


def parse(markup: str) -> ElementTree.Element:
    return ElementTree.fromstring(markup)


def boxes(markup: str) -> dict[str, tuple[int, int]]:
    """Each node's top-left corner, by name."""
    found = {}
    for group in parse(markup).iter(f"{SVG}g"):
        if "dw-node" in group.get("class", ""):
            rect = group.find(f"{SVG}rect")
            assert rect is not None
            found[group.get("data-node", "")] = (int(rect.get("x", 0)), int(rect.get("y", 0)))
    return found


def column(x: int) -> int:
    return (x - MARGIN) // (NODE_WIDTH + COLUMN_GAP)


def test_a_nodes_depth_is_its_longest_path_from_a_root() -> None:
    nodes = [
        node("a"),
        node("b", "waiting", "a"),
        node("c", "waiting", "b"),
        node("d", "waiting", "a", "c"),  # a is one step away, c three: d is at depth 3
        node("e"),
    ]
    assert depths(nodes) == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0}


def test_an_unknown_dependency_or_a_cycle_adds_no_depth() -> None:
    nodes = [node("a", "waiting", "ghost"), node("b", "waiting", "c"), node("c", "waiting", "b")]
    # The first node of a cycle reached is its root; the edge back to it is not followed.
    assert depths(nodes) == {"a": 0, "b": 1, "c": 0}


def test_nodes_go_left_to_right_by_depth_and_down_in_order() -> None:
    markup = workflow(
        node("top"), node("left", "waiting", "top"), node("right", "waiting", "top"),
        node("join", "waiting", "left", "right"),
    )  # fmt: skip
    found = boxes(workflow_svg(markup))
    assert {name: column(x) for name, (x, _y) in found.items()} == {
        "top": 0, "left": 1, "right": 1, "join": 2,
    }  # fmt: skip
    assert found["left"][1] < found["right"][1]
    assert found["top"][1] == found["left"][1] == found["join"][1]


def test_the_markup_is_well_formed_svg_with_a_title() -> None:
    root = parse(workflow_svg(workflow(node("a", "running"))))
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "group"
    title = root.find(f"{SVG}title")
    assert title is not None
    assert title.text == "Workflow 42::wf: running, 1 node"
    assert root.get("aria-labelledby") == title.get("id")


def test_each_node_has_its_state_colour_a_title_and_text_labels() -> None:
    info = workflow(
        *(node(f"n-{state}", state) for state in ("waiting", "pending", "running", "completed")),
        node("n-failed", "failed", reason="boom"),
        node("n-cancelled", "cancelled", reason="workflow"),
    )
    root = parse(workflow_svg(info))
    for group in root.iter(f"{SVG}g"):
        state = group.get("data-state", "")
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        assert (rect.get("fill"), rect.get("stroke")) == STATE_COLOURS[state]
        texts = [t.text for t in group.iter(f"{SVG}text")]
        assert texts == [group.get("data-node"), state]
        title = group.find(f"{SVG}title")
        assert title is not None
        assert title.text is not None
        assert title.text.startswith(f"{group.get('data-node')}: {state}")
    titles = "".join(t.text or "" for t in root.iter(f"{SVG}title"))
    assert "reason: boom" in titles


def test_an_unknown_state_is_drawn_plainly() -> None:
    assert colours("something-new") == UNKNOWN_COLOURS
    root = parse(workflow_svg(workflow(node("a", "something-new"))))
    rect = next(root.iter(f"{SVG}rect"))
    assert (rect.get("fill"), rect.get("stroke")) == UNKNOWN_COLOURS


def test_an_edge_joins_each_dependency_and_is_dashed_into_an_always_node() -> None:
    info = workflow(
        node("a"), node("b", "waiting", "a"), node("c", "waiting", "a", "b", always=True)
    )
    paths = [p for p in parse(workflow_svg(info)).iter(f"{SVG}path") if p.get("class") == "dw-edge"]
    edges = {(p.get("data-from"), p.get("data-to")): p for p in paths}
    assert set(edges) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert edges[("a", "b")].get("stroke-dasharray") is None
    assert edges[("b", "c")].get("stroke-dasharray") == "5 3"
    marker = edges[("a", "b")].get("marker-end")
    assert marker is not None
    assert re.fullmatch(r"url\(#dw-arrow-[0-9a-f]{10}\)", marker)


def test_nodes_link_to_their_tasks_and_undos_once_queued() -> None:
    idle = UndoInfo(state="idle", task_path="shop.refund", queue="default")
    running = UndoInfo(state="running", task_path="shop.unship", queue="q", task_id="42::wf:b:undo")
    info = workflow(node("a", "completed", undo=idle), node("b", "completed", undo=running))
    markup = workflow_svg(info, lambda task_id: f"/tasks/{task_id}/")
    root = parse(markup)
    links = {a.get("href"): a for a in root.iter(f"{SVG}a")}
    assert set(links) == {"/tasks/42::wf:a/", "/tasks/42::wf:b/", "/tasks/42::wf:b:undo/"}
    undos = [g for g in root.iter(f"{SVG}g") if "dw-undo" in g.get("class", "")]
    assert [(g.get("data-node"), g.get("data-state")) for g in undos] == [
        ("a", "idle"),
        ("b", "running"),
    ]
    assert "undo: running" in [t.text for t in root.iter(f"{SVG}text")]


def test_without_a_task_url_nothing_is_linked() -> None:
    assert "<a " not in workflow_svg(workflow(node("a")))


def test_every_name_and_reason_is_escaped() -> None:
    hostile = '<script>alert("x")</script>&'
    info = workflow(
        node(hostile, "failed", reason=hostile, queue=hostile),
        node("b", "waiting", hostile),
    )
    markup = workflow_svg(info, lambda task_id: f"/t/{task_id}?a=1&b=2")
    assert "<script>" not in markup
    root = parse(markup)  # still well formed
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert hostile[:20] + "…" in texts
    hrefs = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert f"/t/42::wf:{hostile}?a=1&b=2" in hrefs


def test_a_long_name_is_cut_in_its_box_and_whole_in_its_title() -> None:
    name = "a-really-long-node-name-that-goes-on"
    root = parse(workflow_svg(workflow(node(name))))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts[0] == "a-really-long-node-n…"
    assert any((t.text or "").startswith(f"{name}: waiting") for t in root.iter(f"{SVG}title"))


def test_two_pictures_on_one_page_do_not_share_ids() -> None:
    one = workflow_svg(workflow(node("a")))
    other = workflow_svg(replace(workflow(node("a")), id="7::other"))
    ids = re.compile(r'id="([^"]+)"')
    assert not set(ids.findall(one)) & set(ids.findall(other))


# -- edges never cross a box ---------------------------------------------------------------------

Point = tuple[float, float]
Rect = tuple[float, float, float, float]  # left, top, right, bottom


def edge_segments(d: str) -> list[tuple[Point, Point]]:
    """The straight pieces of a path's ``d`` (M, L, and C sampled finely)."""
    tokens = re.findall(r"[MLC]|-?\d+(?:\.\d+)?", d)
    segments: list[tuple[Point, Point]] = []
    at: Point = (0.0, 0.0)
    i = 0
    while i < len(tokens):
        command = tokens[i]
        if command == "M":
            at = (float(tokens[i + 1]), float(tokens[i + 2]))
            i += 3
        elif command == "L":
            to = (float(tokens[i + 1]), float(tokens[i + 2]))
            segments.append((at, to))
            at, i = to, i + 3
        else:  # C: two control points and the end, sampled as a polyline
            c1, c2, end = ((float(tokens[i + k]), float(tokens[i + k + 1])) for k in (1, 3, 5))
            previous = at
            for step in range(1, 41):
                t = step / 40
                point = tuple(
                    (1 - t) ** 3 * p0
                    + 3 * (1 - t) ** 2 * t * p1
                    + 3 * (1 - t) * t**2 * p2
                    + t**3 * p3
                    for p0, p1, p2, p3 in zip(at, c1, c2, end, strict=True)
                )
                segments.append((previous, point))  # type: ignore[arg-type]
                previous = point  # type: ignore[assignment]
            at, i = end, i + 7
    return segments


def crosses(segment: tuple[Point, Point], rect: Rect) -> bool:
    """Whether a segment enters the inside of a rectangle (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = segment
    left, top, right, bottom = rect
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - left), (dx, right - x0), (-dy, y0 - top), (dy, bottom - y0)):
        if p == 0:
            if q <= 0:
                return False
        elif p < 0:
            low = max(low, q / p)
        else:
            high = min(high, q / p)
    return low < high


def rects(markup: str) -> dict[str, list[Rect]]:
    """Each node's boxes (its own and its undo's), shrunk by a pixel: touching is not crossing."""
    found: dict[str, list[Rect]] = {}
    for group in parse(markup).iter(f"{SVG}g"):
        rect = group.find(f"{SVG}rect")
        if rect is None:
            continue
        x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
        w, h = float(rect.get("width", 0)), float(rect.get("height", 0))
        found.setdefault(group.get("data-node", ""), []).append(
            (x + 1, y + 1, x + w - 1, y + h - 1)
        )
    return found


def crossings(markup: str) -> list[tuple[str, str, str]]:
    """(from, to, box) for every edge that passes through a box other than its two ends'."""
    boxes_of = rects(markup)
    found = []
    for path in parse(markup).iter(f"{SVG}path"):
        if path.get("class") != "dw-edge":
            continue
        ends = {path.get("data-from"), path.get("data-to")}
        for segment in edge_segments(path.get("d", "")):
            for name, shapes in boxes_of.items():
                others = shapes if name not in ends else shapes[1:]  # an end's undo box counts
                if any(crosses(segment, shape) for shape in others):
                    found.append((str(path.get("data-from")), str(path.get("data-to")), name))
    return sorted(set(found))


def fan_out_and_merge(*, undo: bool) -> WorkflowInfo:
    """A root, a fan-out of three, their merge, and a node after both the root and the merge."""
    extra = {"undo": UndoInfo(state="idle", task_path="t.undo", queue="q")} if undo else {}
    return workflow(
        node("root", "completed", **extra),
        *(node(f"part{i}", "completed", "root", **extra) for i in range(3)),
        node("merge", "running", "part0", "part1", "part2", **extra),
        node("report", "waiting", "root", "merge", always=True),
        node("audit", "waiting", "root"),
        node("late", "waiting", "part2", "report"),
    )


def test_the_crossing_check_sees_an_edge_through_a_box() -> None:
    assert crosses(((0, 5), (100, 5)), (40, 0, 60, 10))
    assert not crosses(((0, 20), (100, 20)), (40, 0, 60, 10))
    assert not crosses(((30, 5), (39, 5)), (40, 0, 60, 10))


def test_no_edge_crosses_a_box() -> None:
    for undo in (False, True):
        markup = workflow_svg(fan_out_and_merge(undo=undo))
        paths = [p for p in parse(markup).iter(f"{SVG}path") if p.get("class") == "dw-edge"]
        assert len(paths) == 11
        assert crossings(markup) == [], f"undo={undo}"


def test_a_long_edge_stays_inside_the_picture() -> None:
    markup = workflow_svg(fan_out_and_merge(undo=True))
    root = parse(markup)
    height = float(root.get("height", 0))
    for path in root.iter(f"{SVG}path"):
        if path.get("class") == "dw-edge":
            for (_, y0), (_, y1) in edge_segments(path.get("d", "")):
                assert 0 < y0 < height
                assert 0 < y1 < height
