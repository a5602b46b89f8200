"""The CodeMirror editor widget, headless: traits, jump_to, diagnostics → marks, the editor
panel with it and with its text-area fallback, and the committed bundle itself.

What only a browser can show (typing, highlighting, underlines, the cursor after a click) is
in tests/test_browser.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("anywidget")

import traitlets  # noqa: E402
from comm import DummyComm  # noqa: E402

from cfgzip_lab.grammar.diagnostics import Diagnostic  # noqa: E402
from cfgzip_lab.widgets import code_editor  # noqa: E402
from cfgzip_lab.widgets.code_editor import (  # noqa: E402
    CodeEditor,
    CodeEditorUnavailable,
    editor_marks,
    point_mark,
)
from cfgzip_lab.widgets.session import WorkbenchSession  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JS = REPO / "js"

GOOD = 'root ::= item+\nitem ::= "a" | "b"\n'
BROKEN = 'root ::= item+\nitem ::= "a" | missing_rule\n'  # line 2, column 16: undefined rule


class RecordingComm(DummyComm):
    """The comm a kernel would give the widget, keeping what the widget sends to the front end."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sent: list[dict] = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
        if msg_type == "comm_msg" and data and data.get("method") == "custom":
            self.sent.append(data["content"])


def _from_front_end(widget, **state) -> None:
    """What ipywidgets does with an update message from the browser."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


@pytest.fixture
def session(checker):
    s = WorkbenchSession(GOOD, source="test", tokenizer="llama3", checker=checker)
    yield s
    s.close()
    s.wait(30)


# --------------------------------------------------------------------------- the widget


def test_traits_sync_both_ways():
    editor = CodeEditor(value=GOOD)
    state = editor.get_state()
    assert state["value"] == GOOD and state["cursor"] == {"line": 1, "column": 1} and state["diagnostics"] == []
    assert "export" in state["_esm"] and len(state["_esm"]) > 50_000  # the bundle itself, inline
    _from_front_end(editor, value=BROKEN, cursor={"line": 2, "column": 5})
    assert editor.value == BROKEN and editor.cursor == {"line": 2, "column": 5}


def test_diagnostics_trait_fills_defaults_and_refuses_bad_marks():
    editor = CodeEditor(value=GOOD)
    editor.diagnostics = [{"line": 2, "column": "3", "message": "m"}]
    assert editor.diagnostics == [
        {"line": 2, "column": 3, "end_line": 2, "end_column": 3, "severity": "error", "message": "m"}
    ]
    with pytest.raises(traitlets.TraitError, match=r"diagnostics\[0\] needs integer 'line' and 'column'"):
        editor.diagnostics = [{"line": 1, "message": "no column"}]


@pytest.mark.parametrize(
    "line__column__expected",
    [
        ((2, 10), (2, 10)),
        ((2, 99), (2, 19)),  # past the line's end: its end ('item ::= "a" | "b"' has 18 characters)
        ((99, 1), (3, 1)),  # past the text: the last line (empty, after the final newline)
        ((0, 0), (1, 1)),
    ],
)
def test_jump_to_moves_the_cursor_and_tells_the_front_end(line__column__expected):
    (line, column), expected = line__column__expected
    editor = CodeEditor(value=GOOD)
    editor.comm = RecordingComm()
    assert editor.jump_to(line, column) == {"line": expected[0], "column": expected[1]}
    assert editor.cursor == {"line": expected[0], "column": expected[1]}
    assert editor.comm.sent == [{"type": "jump", "line": expected[0], "column": expected[1]}]


def test_missing_bundle_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(code_editor, "BUNDLE", tmp_path / "nowhere.js")
    with pytest.raises(CodeEditorUnavailable, match="npm run build"):
        CodeEditor(value=GOOD)


# --------------------------------------------------------------------------- diagnostics → marks

TEXT = 'root ::= a\na ::= "x" | oops\n\nb ::= "é" c\n'
#        line 1: root ::= a          offsets 0-9, newline at 10
#        line 2: a ::= "x" | oops    offsets 11-26, newline at 27
#        line 3: (empty)             newline at 28
#        line 4: b ::= "é" c         offsets 29-39, newline at 40


@pytest.mark.parametrize(
    "span__line_column__expected",
    [
        # a word inside a line: exactly that word
        ((23, 27), (2, 13), (2, 13, 2, 17)),
        # a span that takes in its line's newline stops before it
        ((23, 28), (2, 13), (2, 13, 2, 17)),
        # an empty span inside a line: the character it points at
        ((23, 23), (2, 13), (2, 13, 2, 14)),
        # an empty span at a line's end: a point (CodeMirror draws a point marker)
        ((27, 27), (2, 17), (2, 17, 2, 17)),
        # on an empty line: a point too
        ((28, 28), (3, 1), (3, 1, 3, 1)),
        # across lines
        ((6, 20), (1, 7), (1, 7, 2, 10)),
        # no span: line and column, one character
        (None, (2, 13), (2, 13, 2, 14)),
        # no span, at a line's end
        (None, (1, 11), (1, 11, 1, 11)),
        # offsets past the text (it changed since the check): clamped to its end
        ((500, 600), (9, 9), (5, 1, 5, 1)),
        # code points, not bytes or UTF-16 units: 'c' after 'é' is column 11
        ((39, 40), (4, 11), (4, 11, 4, 12)),
    ],
)
def test_editor_marks(span__line_column__expected):
    span, (line, column), (l0, c0, l1, c1) = span__line_column__expected
    [mark] = editor_marks([Diagnostic(line, column, "msg", "warning", span)], TEXT)
    assert (mark["line"], mark["column"], mark["end_line"], mark["end_column"]) == (l0, c0, l1, c1)
    assert mark["severity"] == "warning" and mark["message"] == "msg" and mark["source"] == "cfgzip"


def test_marks_from_real_diagnostics(session):
    session.compile(BROKEN, xgrammar=False)
    [mark] = editor_marks(session.diagnostics, BROKEN)
    assert (mark["line"], mark["column"], mark["end_line"], mark["end_column"]) == (2, 16, 2, 28)
    assert "missing_rule" in mark["message"] and mark["severity"] == "error"


def test_xgrammar_byte_columns_become_code_points(checker):
    text = 'root ::= "éé" missing\n'
    verdict = checker.check(text)
    assert not verdict.ok and (verdict.line, verdict.column) == (1, 17)  # XGrammar counts UTF-8 bytes
    mark = point_mark(text, verdict.line, verdict.column, verdict.message, source="XGrammar", utf8=True)
    assert text.splitlines()[0][mark["column"] - 1 :].startswith("missing")
    assert (mark["line"], mark["column"], mark["end_column"]) == (1, 15, 16)


# --------------------------------------------------------------------------- the editor panel


def test_panel_pushes_marks_jumps_and_clears_them(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    panel = EditorPanel(session, delay=0)
    assert panel.editor_kind == "codemirror" and panel.text is panel.code_editor
    panel.code_editor.comm = RecordingComm()
    _from_front_end(panel.code_editor, value=BROKEN)  # typed in the browser: checked at once (delay=0)
    assert session.text == BROKEN and not session.grammar_ok
    ours = panel.code_editor.diagnostics
    assert [(m["line"], m["column"], m["end_line"], m["end_column"], m["source"]) for m in ours] == [
        (2, 16, 2, 28, "cfgzip")
    ]
    assert session.wait(60)  # XGrammar's verdict, from its child process
    marks = panel.code_editor.diagnostics
    assert [m["source"] for m in marks] == ["cfgzip", "XGrammar"]
    assert (marks[1]["line"], marks[1]["column"]) == (2, 16) and "missing_rule" in marks[1]["message"]

    buttons = panel.jump_list.children
    assert len(buttons) == 2 and buttons[0].description.startswith("↪ 2:16 ")
    buttons[0].click()
    assert panel.code_editor.cursor == {"line": 2, "column": 16}
    assert panel.code_editor.comm.sent[-1] == {"type": "jump", "line": 2, "column": 16}
    # the diagnostic itself is a link too (issue 35.1: a click on it did nothing, typing went elsewhere)
    assert 'data-action="jump" data-arg="2:16"' in panel.diagnostics.value
    panel.code_editor.comm.sent.clear()
    panel.diagnostics.click_action("jump", "2:16")
    assert panel.code_editor.comm.sent == [{"type": "jump", "line": 2, "column": 16}]

    _from_front_end(panel.code_editor, value=GOOD)  # fixed: the marks and buttons go
    assert session.grammar_ok and panel.code_editor.diagnostics == [] and panel.jump_list.children == ()
    assert session.wait(60) and session.xgrammar.ok
    assert panel.code_editor.diagnostics == [] and "agrees" in panel.xgrammar.value
    assert not [e for e in session.errors if e.where in panel.error_sources]


def test_panel_shows_a_loaded_grammar_in_the_editor(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    panel = EditorPanel(session, delay=0)
    panel.load_bundled("xml")
    assert panel.code_editor.value == session.text and "::=" in session.text
    assert panel.undo_load() and panel.code_editor.value == GOOD


@pytest.mark.parametrize("why", ["asked", "bundle missing"])
def test_textarea_fallback_keeps_the_panel_working(session, monkeypatch, tmp_path, why):
    import ipywidgets as w

    from cfgzip_lab.widgets.editor import EditorPanel

    if why == "asked":
        panel = EditorPanel(session, delay=0, editor="textarea")
        assert panel.fallback_reason == ""
    else:
        monkeypatch.setattr(code_editor, "BUNDLE", tmp_path / "nowhere.js")
        panel = EditorPanel(session, delay=0)
        assert "bundle is missing" in panel.status.value
    assert panel.editor_kind == "textarea" and panel.code_editor is None and isinstance(panel.text, w.Textarea)
    panel.set_text(BROKEN)
    assert not session.grammar_ok and 'data-line="2"' in panel.diagnostics.value
    assert panel.marks()[0]["line"] == 2 and panel.jump_to(2, 16) is None and panel.jump_list.children == ()
    panel.set_text(GOOD)
    assert session.grammar_ok and panel.diagnostics.value == ""


def test_panel_refuses_an_unknown_editor(session):
    from cfgzip_lab.widgets.editor import EditorPanel

    with pytest.raises(ValueError, match="editor must be one of codemirror, textarea"):
        EditorPanel(session, editor="vim")


# --------------------------------------------------------------------------- the committed bundle


def test_bundle_is_one_self_contained_esm_file():
    text = code_editor.BUNDLE.read_text(encoding="utf-8")
    assert text.startswith("// cfgzip_lab's grammar editor (CodeMirror 6), GENERATED")
    assert re.search(r"export\{[^}]*\bas default\b", text), "an ES module with a default export (anywidget's)"
    # nothing fetched at run time: no import of a URL, static or dynamic, and no import at all
    assert not re.search(r"""(?:\bimport\s*\(?|\bfrom)\s*["'](?:https?:)?//""", text)
    assert not re.search(r"""(?:^|[;}\s])import\s*(?:[\w{*]|["'(])""", text)
    # the header names what it bundles, as the lock file pins it
    lock = json.loads((JS / "package-lock.json").read_text())
    for name in ("codemirror", "@codemirror/view", "@codemirror/lint", "@lezer/highlight"):
        assert f"//   {name}@{lock['packages'][f'node_modules/{name}']['version']}\n" in text
    assert f"esbuild {lock['packages']['node_modules/esbuild']['version']}" in text


def test_package_json_pins_exact_versions():
    package = json.loads((JS / "package.json").read_text())
    for section in ("dependencies", "devDependencies"):
        for name, version in package[section].items():
            assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} {version} is not pinned"
    assert package["dependencies"]["codemirror"].startswith("6.")


@pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="js/node_modules absent (cd js && npm ci)")
def test_rebuild_reproduces_the_committed_bundle(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    out = tmp_path / "code_editor.js"
    subprocess.run([node, str(JS / "build.mjs"), "--outfile", str(out)], check=True, timeout=120, cwd=JS)
    assert out.read_bytes() == code_editor.BUNDLE.read_bytes(), "js/src changed: run `cd js && npm run build`"


# ------------------------------------------------------------------ typing: auto-close (node)

# Each line typed key by key into an empty line must read back exactly (issue 21: the JSON string
# rule ended in a stray "]"): the editor's auto-close never adds a character the author then has
# to find and delete.
TYPED_LINES = [
    r'string ::= "\"" [^"\\]* "\""',
    r'char ::= [^"\\\0-\x1f] | "\\" escape',
    r'escape ::= ["\\/bfnrt] | "u" hex{4}',
    r'ws ::= ([ \t\n] | "#" [^\n]*)*  # comments: "quoted" [bracketed] (paren',
    r'list ::= "[" (item ("," item)*)? "]"',
    r'q ::= "\\" | "a\"b" | [\]] | [\\]',
]


@pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="js/node_modules absent (cd js && npm ci)")
@pytest.mark.parametrize("line", TYPED_LINES)
def test_typing_key_by_key_reads_back_exactly(line, tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    script = tmp_path / "type.mjs"
    script.write_text(
        f"import {{ autoClose }} from {json.dumps((JS / 'src' / 'code_editor.js').as_uri())};\n"
        "let text = '', cursor = 0;\n"
        f"for (const key of {json.dumps(line)}) {{\n"
        "  const a = autoClose(text, cursor, key);\n"
        "  if (a === null) { text = text.slice(0, cursor) + key + text.slice(cursor); cursor += 1; }\n"
        "  else if (a.skip) cursor += 1;\n"
        "  else { text = text.slice(0, cursor) + a.insert + text.slice(cursor); cursor += a.cursor; }\n"
        "}\n"
        "console.log(JSON.stringify({ text, cursor }));\n",
        encoding="utf-8",
    )
    out = subprocess.run([node, str(script)], check=True, capture_output=True, text=True, timeout=60, cwd=JS)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"text": line, "cursor": len(line)}


@pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="js/node_modules absent (cd js && npm ci)")
def test_auto_close_table(tmp_path):
    """Outside strings and classes a pair is inserted; inside them never; a closer steps over."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    cases = [
        ("a ::= ", 6, '"', {"insert": '""', "cursor": 1}),
        ("a ::= ", 6, "[", {"insert": "[]", "cursor": 1}),
        ("a ::= ", 6, "(", {"insert": "()", "cursor": 1}),
        ('a ::= "x', 8, "[", None),  # in a string: no pair
        ("a ::= [^", 8, '"', None),  # in a class: no pair (the stray ']' of issue 21)
        ('a ::= "\\"', 9, '"', None),  # an escaped quote, not the end of the string
        ('a ::= ""', 7, '"', {"skip": True}),
        ("a ::= [\\]", 9, "]", None),
        ("a ::= []", 7, "]", {"skip": True}),
        ("a ::= x", 6, '"', None),  # before a word: no pair
        ("# [", 3, '"', None),  # in a comment
    ]
    script = tmp_path / "table.mjs"
    script.write_text(
        f"import {{ autoClose }} from {json.dumps((JS / 'src' / 'code_editor.js').as_uri())};\n"
        f"const cases = {json.dumps([c[:3] for c in cases])};\n"
        "console.log(JSON.stringify(cases.map(([l, c, k]) => autoClose(l, c, k))));\n",
        encoding="utf-8",
    )
    out = subprocess.run([node, str(script)], check=True, capture_output=True, text=True, timeout=60, cwd=JS)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [c[3] for c in cases]


def test_a_mark_carries_its_quick_fix():
    """Issue 35, quick fixes: "did you mean 'qty'?" travels to the editor with the edit, so the
    hover text offers it as a button (fixChange below applies it)."""
    from cfgzip_lab.grammar.ebnf import check_ebnf

    text = 'root ::= "é" qyt\nqty ::= [0-9]+\n'
    (mark,) = [m for m in editor_marks(check_ebnf(text), text) if m["severity"] == "error"]
    assert mark["fix"] == {
        "line": 1,
        "column": 14,
        "end_line": 1,
        "end_column": 17,
        "found": "qyt",
        "replacement": "qty",
        "label": "replace 'qyt' with 'qty'",
    }
    assert all("fix" not in m for m in editor_marks(check_ebnf("root ::= y"), "root ::= y"))


@pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="js/node_modules absent (cd js && npm ci)")
def test_fix_change_applies_the_fix_only_to_the_text_it_was_made_for(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    fix = {"line": 1, "column": 14, "end_line": 1, "end_column": 17, "found": "qyt", "replacement": "qty"}
    texts = ['root ::= "é" qyt\nqty ::= [0-9]+', 'root ::= "é" qty\nqty ::= [0-9]+', "root"]
    state = (JS / "node_modules" / "@codemirror" / "state" / "dist" / "index.js").as_uri()
    script = tmp_path / "fix.mjs"
    script.write_text(
        f"import {{ fixChange }} from {json.dumps((JS / 'src' / 'code_editor.js').as_uri())};\n"
        f"import {{ Text }} from {json.dumps(state)};\n"
        f"const fix = {json.dumps(fix)};\n"
        f"const texts = {json.dumps(texts)};\n"
        "console.log(JSON.stringify(texts.map((t) => fixChange(Text.of(t.split('\\n')), fix))));\n",
        encoding="utf-8",
    )
    out = subprocess.run([node, str(script)], check=True, capture_output=True, text=True, timeout=60, cwd=JS)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [{"from": 13, "to": 16, "insert": "qty"}, None, None]


@pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="js/node_modules absent (cd js && npm ci)")
def test_enter_keeps_the_closers_of_its_line(tmp_path):
    """Issue 35.3: Enter before only the ')' auto-closed for this line's groups leaves them on the
    line (the next rule then starts a line of its own); elsewhere Enter splits as usual."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    line = 'action ::= ("mix" | "bake" ws qty)'
    cases = [
        (line, len(line) - 1, 1),  # the issue's line: the ')' stays
        ('a ::= (("x" | "y"))', 17, 2),  # two closers, two groups of this line
        ('a ::= ("x") ', 10, 2),  # trailing blanks go with it
        ("a ::= ()", 7, 0),  # right after '(': CodeMirror's own Enter opens the pair
        ('a ::= "x")', 9, 0),  # a ')' this line did not open (a group from a line above)
        ('a ::= ("x" y)', 11, 0),  # other text after the cursor
        ('a ::= "(x)', 9, 0),  # in a string
        ("a ::= [(])", 9, 0),  # a '(' in a class opens nothing
        ('a ::= "x" # (c)', 14, 0),  # in a comment
        ('a ::= ("x"', 10, 0),  # nothing after the cursor
    ]
    script = tmp_path / "enter.mjs"
    script.write_text(
        f"import {{ closersKept }} from {json.dumps((JS / 'src' / 'code_editor.js').as_uri())};\n"
        f"const cases = {json.dumps([c[:2] for c in cases])};\n"
        "console.log(JSON.stringify(cases.map(([l, c]) => closersKept(l, c))));\n",
        encoding="utf-8",
    )
    out = subprocess.run([node, str(script)], check=True, capture_output=True, text=True, timeout=60, cwd=JS)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [c[2] for c in cases]


def test_read_only_trait_syncs():
    editor = CodeEditor(value=GOOD, read_only=True)
    assert editor.get_state()["read_only"] is True
