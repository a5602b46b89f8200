"""The author's views of issue 21, headless: parse trees and expected literals in Samples, the
test list (Tests tab), the schema view in the editor, FIRST/FOLLOW/shortest/lint in Structure,
rule names that jump to the editor, hints and lint warnings among the diagnostics, and the
plotly template made from JupyterLab's theme. Real XGrammar (child process)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

from cfgzip_lab.grammar.testlist import GrammarTest, load_tests  # noqa: E402
from cfgzip_lab.widgets.session import WorkbenchSession  # noqa: E402

ROBOT = """root ::= command (";" ws command)*
command ::= "turn" ws turn | "go" ws number
turn ::= "left" | "right"
number ::= [0-9]+
ws ::= [ \\t]*
"""
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "attendees": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "n": {"not": {"type": "string"}},
    },
    "required": ["title"],
}


@pytest.fixture
def session(checker):
    s = WorkbenchSession(ROBOT, tokenizer="smollm2", checker=checker)
    s.compile(xgrammar=False)
    yield s
    s.close()
    s.wait(30)


def _msg(widget, content):
    """What the front end sends (a click in the browser)."""
    widget._handle_custom_msg(content, [])


def test_samples_show_expected_literals_and_parse_trees(session):
    from cfgzip_lab.widgets.samples import SamplesPanel

    panel = SamplesPanel(session)
    panel.set_samples(["turn left", "turn up", "turnleft"])
    results = panel.check_samples()
    assert [r.ours.kind for r in results] == ["accepted", "rejected", "accepted"]
    assert results[1].expected_terms == 'expected [ \\t] (rule ws, line 5) or "left" or "right" (rule turn, line 3)'
    html = panel.output.value
    # literals before bytes
    assert html.index('expected [ \\t] (<span data-rule="ws">rule ws') < html.index("bytes expected there")
    assert 'data-action="tree" data-arg="1"' in html
    assert '(<span data-rule="turn">rule turn</span>, line 3)' in html  # the rule named is a link
    _msg(panel.output, {"type": "action", "action": "tree", "arg": "1"})  # a click on "tree"
    tree = panel.tree.value
    assert panel.tree_result.sample == "turn up" and "rejected</span> at line 1, column 6" in tree
    assert (
        "data-sample-root" in tree and '<pre class="cfgzip-code cfgzip-tree-sample" data-sample>turn up</pre>' in tree
    )
    assert 'data-span="0,5"' in tree and 'data-rule="turn"' in tree and "stopped here" in tree
    accepted = panel.show_tree(0)
    assert accepted.accepted and "<details open>" in panel.tree.value and 'data-span="5,9"' in panel.tree.value
    # issue 35.7: no "expected …" line above an accepted tree; what may follow comes after it, muted
    tree = panel.tree.value
    assert "cfgzip-expected-terms" not in tree and tree.index("<details") < tree.index("it could also go on: ")
    assert "«turn left»" in tree and "&#x27;turn left&#x27;" not in tree  # the text as typed, not repr()
    # the shown tree follows the grammar: with "up" allowed it is accepted
    session.compile(ROBOT.replace('"left" | "right"', '"left" | "right" | "up"'), xgrammar=False)
    assert panel.results[1].ours.kind == "accepted"


def test_parse_tree_labels_show_the_text_as_typed(checker):
    """Issue 35.7: labels went through repr(), so a JSON string read '"Mum\\'s \\\\"best\\\\""'."""
    from html import escape

    from cfgzip_lab.widgets.samples import SamplesPanel

    s = WorkbenchSession('root ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\])* "\\""\n', checker=checker)
    try:
        assert s.compile(xgrammar=False), s.diagnostics
        panel = SamplesPanel(s)
        sample = '"Mum\'s \\"best\\" cake"'
        panel.set_samples([sample, '"tab\there"'])
        panel.check_samples()
        assert panel.show_tree(0).accepted
        assert escape(f"«{sample}»") in panel.tree.value
        assert panel.show_tree(1).accepted
        assert escape('«"tab\\there"»') in panel.tree.value  # a control character is escaped
    finally:
        s.close()


def test_an_ambiguous_sample_is_flagged(checker):
    from cfgzip_lab.widgets.samples import SamplesPanel

    s = WorkbenchSession('root ::= word (" " word)*\nword ::= "if" | [a-z]+\n', checker=checker)
    try:
        s.compile(xgrammar=False)
        panel = SamplesPanel(s)
        panel.set_samples(["if x", "x y"])
        results = panel.check_samples()
        assert results[0].ambiguous and not results[1].ambiguous
        assert "⚠ ambiguous: rule word matches &#x27;if&#x27; in two ways" in panel.output.value
    finally:
        s.close()


def test_the_test_list_runs_on_every_check_and_saves_beside_the_grammar(session, tmp_path):
    from cfgzip_lab.widgets.samples import SamplesPanel
    from cfgzip_lab.widgets.tests_panel import TestsPanel

    grammar = tmp_path / "robot.ebnf"
    session.save_file(grammar)
    panel = TestsPanel(session, folder=tmp_path)
    assert "no tests yet" in panel.summary.value
    panel.add_test("turn left")
    panel.add_test("turnleft", "reject")
    panel.new_text.value, panel.new_expect.value = "go", "prefix"
    panel.add_test()  # the form, as the button reads it
    assert [o.passed for o in session.test_outcomes] == [True, False, True]
    assert "2 of 3 tests pass" in panel.summary.value and 'class="cfgzip-fail-row"' in panel.table.value
    assert "FAIL</span> · should reject, got accepted" in panel.table.value
    # the fix, typed into the grammar: the tests run again and now pass
    fixed = ROBOT.replace('"turn" ws turn', '"turn" [ \\t]+ turn')
    session.compile(fixed, xgrammar=False)
    assert [o.passed for o in session.test_outcomes] == [True, True, True]
    assert "3 of 3 tests pass" in panel.summary.value and "cfgzip-fail-row" not in panel.table.value
    # a click on an expectation changes it; ✕ removes the test
    _msg(panel.table, {"type": "action", "action": "cycle", "arg": "2"})
    assert session.tests[2].expect == "accept" and not session.test_outcomes[2].passed
    _msg(panel.table, {"type": "action", "action": "remove", "arg": "2"})
    assert len(session.tests) == 2
    # samples and generated strings join the list with their expectations
    samples = SamplesPanel(session)
    samples.set_samples(["go 1", "go x"])
    samples.add_samples_as_tests()
    samples.generate_samples(3, seed=2)
    samples.add_generated_as_tests()
    expects = [(t.text, t.expect) for t in session.tests]
    assert ("go 1", "accept") in expects and ("go x", "reject") in expects
    assert all(t.expect == "accept" for t in session.tests if t.note == "generated")
    assert all(o.passed for o in session.test_outcomes)
    # saved beside the grammar, loaded back by opening the grammar again
    saved = panel.save_tests()
    assert saved == tmp_path / "robot.tests.json" and load_tests(saved) == session.tests
    assert json.loads(saved.read_text())["grammar"] == "robot.ebnf"  # relative: the pair moves together
    count = len(session.tests)
    session.set_tests([])
    session.tests_path = None
    session.load_file(grammar)
    assert len(session.tests) == count and session.tests_path == saved
    tree = panel.show_tree(0)
    assert tree.accepted and "Parse tree of test #1" in panel.tree.value


def test_rule_names_jump_to_the_editor(checker):
    from cfgzip_lab.widgets import Workbench

    app = Workbench(ROBOT, delay=0, draft=False, editor="codemirror")
    try:
        app.select("Structure")
        _msg(app.structure.diagram, {"type": "rule", "rule": "turn"})  # a railroad box clicked
        assert app.tabs.selected_index == 0 and app.editor.code_editor.cursor == {"line": 3, "column": 1}
        assert 'data-rule="turn"' in app.structure.rules_table.value
        app.select("Samples")
        app.samples.set_samples(["turn up"])
        app.samples.check_samples()
        app.samples.show_tree(0)
        _msg(app.samples.tree, {"type": "rule", "rule": "ws"})
        assert app.tabs.selected_index == 0 and app.editor.code_editor.cursor == {"line": 5, "column": 1}
    finally:
        app.close()


def test_structure_shows_first_follow_shortest_and_the_lint(session):
    from cfgzip_lab.widgets.structure import StructurePanel

    panel = StructurePanel(session)
    rows = {r["rule"]: r for r in panel.rule_rows}
    assert rows["turn"]["first_terms"] == '"left" | "right"' and rows["turn"]["shortest"] == "'left'"
    assert rows["turn"]["follow"] == '";" or the end of the input' and rows["ws"]["shortest"] == "''"
    assert rows["root"]["follow"] == "the end of the input"
    assert "2 place(s) where words can run together" in panel.checks.value
    assert "&#x27;turnleft&#x27; is accepted" in panel.checks.value
    panel.show_rule("command")
    assert "can be followed by:" in panel.diagram.value and 'data-rule="command"' in panel.diagram.value
    assert "FOLLOW (literals)" in panel.sets_table.value


def test_diagnostics_carry_hints_and_the_lint(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    editor = EditorPanel(session, delay=0)
    warnings = [d for d in session.diagnostics if d.severity == "warning"]
    assert [(d.line, d.column) for d in warnings] == [(2, 20), (2, 35)]
    assert any("turnleft" in m["message"] for m in editor.marks())  # underlined in the editor
    editor.set_text(ROBOT.replace("[0-9]+", "\\d+"))
    assert any("write [0-9]" in d.message for d in session.diagnostics if d.severity == "error")


def test_a_schema_shows_the_grammar_xgrammar_built_and_what_it_ignores(checker):
    from cfgzip_lab.widgets.editor import EditorPanel

    text = json.dumps(SCHEMA, indent=2)
    s = WorkbenchSession(text, checker=checker)
    try:
        editor = EditorPanel(s, delay=0)
        s.compile(xgrammar=False)
        ebnf = editor.show_converted()
        assert ebnf == s.grammar_text and "root_prop_1" in ebnf
        assert editor.converted.selected_index == 0 and editor.converted.layout.display != "none"
        assert editor.converted_editor is not None and editor.converted_editor.read_only
        report = editor.schema_report.value
        assert "uniqueItems" in report and "not enforced: repeated items are accepted" in report
        assert "/properties/n" in report and "<b>not</b>" in report
        assert "properties must come in the order the schema lists them" in report
        assert 'data-rule="root_prop_1"' in report and "/properties/attendees" in report
        assert s.rule_pointer("root_prop_1") == "/properties/attendees"
        _msg(editor.schema_report, {"type": "rule", "rule": "root_prop_1"})  # into the read-only view
        line = ebnf[: ebnf.index("root_prop_1 ::=")].count("\n") + 1
        assert s.jump_target["in"] == "converted" and editor.converted_editor.cursor == {"line": line, "column": 1}
        s.compile(ROBOT, xgrammar=False)  # EBNF again: nothing converted to show
        assert editor.converted.layout.display == "none"
    finally:
        s.close()


def test_a_plotly_template_from_the_theme_colours_every_chart(checker):
    from cfgzip_lab.widgets import Workbench
    from cfgzip_lab.widgets.theme import plotly_template

    dark = {
        "light": False,
        "name": "JupyterLab Dark",
        "vars": {"layout-color1": "#212121", "ui-font-color1": "rgba(255, 255, 255, 1)", "border-color2": "#424242"},
    }
    template = plotly_template(dark)["layout"]
    assert template["paper_bgcolor"] == "#212121" and template["font"]["color"] == "rgba(255, 255, 255, 1)"
    assert template["xaxis"]["gridcolor"] == "#424242"
    app = Workbench(ROBOT, delay=0, draft=False, editor="textarea")
    try:
        app.theme.theme = dark  # what the probe in the browser reports
        for figure in app.figures():
            assert figure.layout.paper_bgcolor == "#212121" and figure.layout.font.color == "rgba(255, 255, 255, 1)"
            assert figure.layout.xaxis.gridcolor == "#424242"
        chart = app.decoder.chart.layout
        assert chart.yaxis2.type == "category" and chart.yaxis2.gridcolor == "#424242"  # the axes keep their type
        assert all(a.font.color == "rgba(255, 255, 255, 1)" for a in chart.annotations)  # subplot titles
        app.set_theme(None)  # no report: the light theme
        assert app.decoder.chart.layout.paper_bgcolor == "white"
    finally:
        app.close()


def test_the_theme_is_never_lost_to_a_chart_redrawn_from_another_thread():
    """Issue 35.8: a chart redrawn from a worker thread (a decode step, a re-check) while the
    theme arrived could drop the theme's edits (plotly's batches are not thread-safe) and stay
    white in JupyterLab Dark; measured 17 of 200 before the figure's own lock."""
    import threading

    import plotly.graph_objects as go

    from cfgzip_lab.widgets._figures import batch
    from cfgzip_lab.widgets.theme import apply_theme

    dark = {"light": False, "name": "JupyterLab Dark", "vars": {"layout-color1": "#212121"}}
    for _ in range(40):
        figure = go.FigureWidget()
        for name in ("a", "b", "c"):
            figure.add_bar(name=name, x=[], y=[])
        stop = threading.Event()

        def redraw(figure=figure, stop=stop) -> None:
            step = 0
            while not stop.is_set():
                with batch(figure):
                    for trace in figure.data:
                        trace.x, trace.y = ["step"], [step]
                step += 1

        worker = threading.Thread(target=redraw)
        worker.start()
        try:
            apply_theme(figure, dark)
        finally:
            stop.set()
            worker.join()
        assert figure.layout.paper_bgcolor == "#212121"


def test_html_view_messages_call_their_handlers():
    from cfgzip_lab.widgets.html_view import HtmlView

    view = HtmlView('<span data-rule="a">a</span>')
    got = []
    view.on_rule(lambda name: got.append(("rule", name)))
    view.on_span(lambda start, end: got.append(("span", start, end)))
    view.on_action("tree", lambda arg: got.append(("tree", arg)))
    _msg(view, {"type": "rule", "rule": "a"})
    _msg(view, {"type": "span", "start": 1, "end": 3})
    _msg(view, {"type": "action", "action": "tree", "arg": "2"})
    _msg(view, {"type": "nonsense"})
    assert got == [("rule", "a"), ("span", 1, 3), ("tree", "2")]
    assert "export default" in view.get_state()["_esm"]


def test_tests_of_untitled_grammars_go_to_the_export_folder(session, tmp_path):
    from cfgzip_lab.widgets.tests_panel import TestsPanel

    panel = TestsPanel(session, folder=tmp_path)
    assert panel.default_path() == tmp_path / "untitled.tests.json"
    session.set_tests([GrammarTest("go 1")])
    assert panel.save_tests() == tmp_path / "untitled.tests.json"


def test_a_gbnf_file_shows_the_ebnf_it_becomes(checker, tmp_path):
    from cfgzip_lab.widgets.editor import EditorPanel

    gbnf = tmp_path / "digits.gbnf"
    gbnf.write_text('root ::= "\\x41" digit+\ndigit ::= [0-9]\n', encoding="utf-8")
    s = WorkbenchSession(checker=checker)
    try:
        editor = EditorPanel(s, delay=0, editor="textarea")
        s.load_file(gbnf)
        assert s.kind == "gbnf" and s.grammar_ok
        assert editor.show_converted() == s.grammar_text and "root ::=" in s.grammar_text
        assert "converted from GBNF" in editor.converted.titles[0] and editor.schema_report.value == ""
        assert editor.converted_text.disabled  # the text area fallback is read-only too
    finally:
        s.close()


def test_samples_and_tests_parse_from_a_picked_start_rule(session):
    """Issue 35: a sample or a test of one rule's language (``turn``), judged by both referees
    from that rule; "Add as tests" carries the rule; a rule the grammar loses fails in words."""
    from cfgzip_lab.widgets.samples import SamplesPanel
    from cfgzip_lab.widgets.tests_panel import TestsPanel

    samples = SamplesPanel(session)
    assert [v for _, v in samples.start_rule.options] == ["", "command", "turn", "number", "ws"]
    assert samples.start_rule.options[0][0] == "root (root)"
    samples.set_samples(["left", "turn left", "lef"])
    root_verdicts = [r.ours.kind for r in samples.check_samples()]
    assert root_verdicts == ["rejected", "accepted", "rejected"]
    samples.start_rule.value = "turn"  # the picker, as the browser sets it: re-checks from turn
    assert session.samples_start == "turn"
    results = samples.results
    assert [r.ours.kind for r in results] == ["accepted", "rejected", "prefix"]
    assert [r.xgrammar.kind for r in results] == ["accepted", "rejected", "prefix"]  # XGrammar from turn too
    tree = samples.show_tree(0)
    assert tree.accepted and tree.tree.label == "turn" and "(from rule turn)" in samples.tree.value
    samples.add_samples_as_tests()
    assert [(t.text, t.expect, t.start) for t in session.tests] == [
        ("left", "accept", "turn"),
        ("turn left", "reject", "turn"),
        ("lef", "prefix", "turn"),
    ]
    tests = TestsPanel(session)
    assert all(o.passed for o in session.test_outcomes)
    assert 'from rule <b data-rule="turn">turn</b>' in tests.table.value
    assert [v for _, v in tests.new_start.options][:3] == ["", "command", "turn"]
    tests.new_text.value, tests.new_start.value = "12", "number"
    added = tests.add_test()
    assert added.start == "number" and session.test_outcomes[-1].passed
    assert tests.add_test("go 3", start="root").start == ""  # the root names no rule in the file
    assert tests.show_tree(3).tree.label == "number"
    # the grammar renames turn: its tests fail and say why; the picker keeps the rule, marked
    session.compile(ROBOT.replace("turn ::=", "direction ::=").replace("ws turn", "ws direction"), xgrammar=False)
    assert not session.test_outcomes[0].passed and "no rule 'turn'" in session.test_outcomes[0].describe()
    assert ("turn (not in the grammar)", "turn") in list(samples.start_rule.options)
    samples.start_rule.value = ""  # back to the root
    assert session.samples_start == "" and [r.ours.kind for r in samples.results] == root_verdicts


def test_the_parse_tree_is_drawn_as_svg_and_folds_on_a_click(session):
    """Issue 35: the tree of a sample drawn (SVG boxes laid out by grammar.tree_layout), each node
    with its span for the hover mark and its rule a link; a click on a node's badge (the front
    end's "fold" message) folds it, another unfolds it; another sample starts from the default."""
    import re

    from cfgzip_lab.widgets.samples import SamplesPanel
    from cfgzip_lab.widgets.tests_panel import TestsPanel

    panel = SamplesPanel(session)
    panel.set_samples(["go 12; turn left", "turn right"])
    panel.show_tree(0)
    tree = panel.tree.value
    svg = tree[tree.index("<svg") : tree.index("</svg>")]
    nodes = re.findall(r'<g class="cfgzip-tree-node[^"]*" data-span="(\d+),(\d+)" data-path="([\d.]*)"', svg)
    assert len(nodes) >= 10 and ("0", "16", "") in nodes  # the top spans the whole sample
    assert '<tspan data-rule="command" class="cfgzip-tree-rule">command</tspan>' in svg
    assert svg.count('class="cfgzip-tree-edge"') == len(nodes) - 1
    assert tree.index("<svg") < tree.index("the same tree as text")  # the text tree stays, below
    path = next(p for s, e, p in nodes if (s, e) == ("7", "16"))  # command «turn left»
    assert f'data-action="fold" data-arg="{path}"' in svg and ">−</text>" in svg
    _msg(panel.tree, {"type": "action", "action": "fold", "arg": path})  # the badge, clicked
    folded = panel.tree.value
    after = re.findall(r'data-path="([\d.]*)"', folded[folded.index("<svg") : folded.index("</svg>")])
    assert path in after and not any(p.startswith(path + ".") for p in after)
    assert len(after) == len(nodes) - 5 and ">+5</text>" in folded  # "turn", ws, its space, turn, "left"
    _msg(panel.tree, {"type": "action", "action": "fold", "arg": path})
    assert panel.tree.value == tree
    _msg(panel.tree, {"type": "action", "action": "fold", "arg": path})
    panel.show_tree(1)
    assert panel.tree_view.toggled == set()  # another sample: the default folds
    # the Tests tab draws its trees the same way
    tests = TestsPanel(session)
    tests.add_test("turn left")
    tests.show_tree(0)
    assert "<svg" in tests.tree.value and 'data-action="fold"' in tests.tree.value
