"""The drawn parse tree's layout (cfgzip_lab.grammar.tree_layout), without widgets: no two boxes
overlap, a parent sits centred over its children and above them, boxes fit their text, folding
hides exactly the nodes below, the open nodes of a rejected sample are never folded, and the node
budget counts what it left out. On the bundled grammars' own samples."""

from __future__ import annotations

import itertools

import pytest

from cfgzip_lab.bundled import bundled_grammars, bundled_samples
from cfgzip_lab.grammar.earley import EarleyGrammar
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.tree_layout import GAP, OPEN_DEPTH, layout_tree, merged_children

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""


def _overlap(a, b) -> bool:
    return not (a.x + a.width <= b.x or b.x + b.width <= a.x or a.y + a.height <= b.y or b.y + b.height <= a.y)


def _check_geometry(layout, char_width=7.0):
    for a, b in itertools.combinations(layout.boxes, 2):
        assert not _overlap(a, b), (a, b)
    for box in layout.boxes:
        assert box.width >= char_width * max(len(box.label), len(box.text))  # its text fits inside
        assert 0 <= box.x and box.x + box.width <= layout.width + 1e-6 and box.y + box.height <= layout.height
    by_parent = {}
    for parent, child in layout.edges():
        assert child.y > parent.y + parent.height  # each child below its parent
        by_parent.setdefault(parent.path, []).append(child)
    for path, kids in by_parent.items():
        parent = layout.box(path)
        left, right = kids[0].x, kids[-1].x + kids[-1].width
        # centred over the block of its children's subtrees (within the GAP rounding of the block)
        assert left - GAP <= parent.center <= right + GAP, (parent, left, right)
        assert [k.x for k in kids] == sorted(k.x for k in kids)  # left to right as in the sample


def _all_samples():
    for name in bundled_grammars():
        for path in bundled_samples(name)[:2]:
            yield pytest.param(name, path, id=f"{name}-{path.stem}")


@pytest.mark.parametrize("name, path", list(_all_samples()))
def test_bundled_samples_lay_out_without_overlaps(name, path):
    grammar = EarleyGrammar(parse_ebnf(bundled_grammars()[name].read_text(encoding="utf-8")))
    sample = path.read_text(encoding="utf-8")
    parse = grammar.parse(sample)
    assert parse.tree is not None
    _check_geometry(layout_tree(parse.tree, sample))
    # every node unfolded (each folded node toggled): still no overlap, more boxes
    folded = layout_tree(parse.tree, sample)
    opened = layout_tree(parse.tree, sample, toggled={b.path for b in folded.boxes if b.folded}, max_nodes=400)
    _check_geometry(opened)


def test_folding_hides_exactly_the_nodes_below():
    g = EarleyGrammar(parse_ebnf(ROBOT))
    sample = "go 12; turn left"
    tree = g.parse(sample).tree
    full = layout_tree(tree, sample, open_depth=99)
    assert not any(b.folded for b in full.boxes)
    command = next(b for b in full.boxes if b.label == "command" and b.text == "«turn left»")
    below = [b for b in full.boxes if b.path.startswith(command.path + ".")]
    folded = layout_tree(tree, sample, open_depth=99, toggled={command.path})
    box = folded.box(command.path)
    assert box.folded and box.below == len(below) == 5  # "turn", ws and its space, turn, "left"
    assert len(folded.boxes) == len(full.boxes) - len(below)
    _check_geometry(folded)
    # by default the levels from OPEN_DEPTH on start folded; a click (toggle) opens one
    default = layout_tree(tree, sample, open_depth=2)
    assert all(b.depth <= 2 for b in default.boxes)
    deep = [b for b in default.boxes if b.depth == 2 and b.children]
    assert deep and all(b.folded for b in deep)
    one = layout_tree(tree, sample, open_depth=2, toggled={deep[0].path})
    assert not one.box(deep[0].path).folded and any(b.parent == deep[0].path for b in one.boxes)
    assert OPEN_DEPTH >= 3  # JSON's value → object → member is drawn open


def test_runs_of_one_class_are_one_box():
    g = EarleyGrammar(parse_ebnf(ROBOT))
    sample = "go 123"
    tree = g.parse(sample).tree
    number = next(n for n in tree.walk() if n.label == "number")
    assert [count for _, _, count in merged_children(number.children)] == [3]
    layout = layout_tree(tree, sample)
    run = next(b for b in layout.boxes if b.label == "[0-9] ×3")
    assert run.text == "«123»" and (run.start, run.end) == (3, 6) and run.count == 3


def test_a_rejected_samples_open_nodes_stay_unfolded():
    g = EarleyGrammar(parse_ebnf(ROBOT))
    sample = "go 1; turn lef"
    parse = g.parse(sample)
    assert not parse.accepted
    layout = layout_tree(parse.tree, sample, open_depth=1)
    open_boxes = [b for b in layout.boxes if not b.complete]
    assert open_boxes and not any(b.folded for b in open_boxes)
    assert any(b.label == '"left"' and not b.complete for b in layout.boxes)  # where it stopped, drawn


def test_the_node_budget_counts_what_it_leaves_out():
    g = EarleyGrammar(parse_ebnf(ROBOT))
    sample = ";".join(["go 1"] * 30)
    tree = g.parse(sample).tree
    total = len(layout_tree(tree, sample, open_depth=99).boxes)
    cut = layout_tree(tree, sample, open_depth=99, max_nodes=20)
    assert len(cut.boxes) == 20 and len(cut.boxes) + cut.hidden == total
    _check_geometry(cut)
