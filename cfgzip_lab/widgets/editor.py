"""Grammar editor: CodeMirror (or a text area), bundled grammars, file load/save, live diagnostics,
XGrammar's verdict.

Typing re-checks the grammar ``delay`` seconds after the last keystroke (debounced;
``delay=0`` checks at once, for tests). Every diagnostic is listed with its line and
column and the offending line with a caret under the column. XGrammar's own compile
result is shown beside ours; it comes from a child process (see
:mod:`.xgrammar_worker`), because some grammars crash xgrammar 0.2.8.

The text typed is the session's text from the first keystroke on: a failed check, a
load (undo with "Undo load") or a re-run never drops it, and each check also writes it to
the session's draft file when there is one.

The text field is a :class:`~.code_editor.CodeEditor` (CodeMirror 6: line numbers, EBNF
highlighting, Tab indents, diagnostics underlined in the text) unless ``editor="textarea"``
or its bundle is missing; then it is a plain ``Textarea`` and everything else works the
same. After every check, ours and XGrammar's diagnostics are pushed into the editor as marks,
and each is listed as a button that puts the cursor on it (:meth:`EditorPanel.jump_to`).

For a JSON Schema or a GBNF file, "Grammar built from the schema" (or "converted from GBNF")
shows the EBNF the engines compile, read-only and highlighted, and for a schema what XGrammar
made of it (:mod:`cfgzip_lab.grammar.schema_info`): each rule's JSON pointer, the keywords it
ignores or weakens, the property-order rule, the keywords that make the grammar costly and
XGrammar's own warnings. A rule name clicked anywhere in the workbench (topic ``"jump"``) puts
the cursor on its definition: in the text typed, or in that read-only view.

Beside the status, "live classes" (:mod:`.live_view`) shows the class count and compression of
the checked version and how they moved since the last one; the session re-classes by itself
after each successful check while that stays under its budget (issue 18.6).
"""

from __future__ import annotations

import threading

import ipywidgets as w

from .. import xgrammar_version
from ..grammar.diagnostics import QuickFix, position_of, quick_fix
from ..grammar.schema_info import show_pointer
from ..pipeline import bundled_grammars
from ._base import Panel
from ._format import diagnostic_html, esc, fmt_seconds, table
from .code_editor import CodeEditor, bundle_available, editor_marks, point_mark
from .html_view import HtmlView
from .live_view import LiveClassesView
from .session import WorkbenchError

__all__ = ["EditorPanel", "EDITORS"]

_CHOOSE = "— bundled grammar —"
EDITORS = ("codemirror", "textarea")
_KIND_LABELS = {
    "auto": "auto",
    "ebnf": "EBNF",
    "gbnf": "GBNF",
    "json_schema": "JSON Schema",
    "structural_tag": "structural tag",
    "lark": "Lark",
    "regex": "regex",
}


def _position(arg: str) -> tuple[int, int]:
    """``"line:column"`` (a diagnostic's ``data-arg``) as two numbers."""
    line, _, column = arg.partition(":")
    return int(line), int(column or 1)


_JUMP_LABEL = 70  # characters of a diagnostic's message on its jump button (the tooltip has all)


class EditorPanel(Panel):
    """The grammar editor. Public methods: :meth:`compile`, :meth:`load_bundled`,
    :meth:`load_file`, :meth:`save_file`, :meth:`undo_load`, :meth:`restore_draft`, :meth:`flush`,
    :meth:`jump_to`.

    ``editor``: ``"codemirror"`` (default; falls back to ``"textarea"`` when the bundle is
    missing, see ``fallback_reason``) or ``"textarea"``. ``text`` is the text widget either way
    (its ``value`` is the text); ``code_editor`` is the CodeEditor or None.
    """

    error_sources = ("compile", "load grammar", "save grammar", "xgrammar", "jump", "fix", "schema")

    def __init__(self, session, *, delay: float = 0.4, editor: str = "codemirror") -> None:
        if editor not in EDITORS:
            raise ValueError(f"editor must be one of {', '.join(EDITORS)}, not {editor!r}")
        super().__init__(session)
        self.delay = delay
        self._timer: threading.Timer | None = None
        self._timer_lock = threading.Lock()
        self._syncing = False
        self._marks_lock = threading.Lock()  # "grammar" and "xgrammar" may both redraw, from two threads

        self.bundled = w.Dropdown(
            options=[_CHOOSE, *bundled_grammars()], value=_CHOOSE, description="Load", layout=w.Layout(width="250px")
        )
        self.bundled.add_class("cfgzip-bundled")
        self.bundled.observe(self._on_bundled, names="value")
        self.path = w.Text(placeholder="path/to/grammar.ebnf", description="File", layout=w.Layout(width="280px"))
        self.path.add_class("cfgzip-grammar-path")
        load = self._button("Open", "cfgzip-open-file", self.load_file, where="load grammar", icon="folder-open")
        save = self._button("Save", "cfgzip-save-file", self.save_file, where="save grammar", icon="save")
        undo = self._button("Undo load", "cfgzip-undo-load", self.undo_load, where="load grammar", icon="undo")
        draft = self._button(
            "Restore draft",
            "cfgzip-restore-draft",
            self.restore_draft,
            where="load grammar",
            icon="history",
            tooltip="the text typed at the last check, kept on disk per notebook (after a kernel restart)",
        )
        self.draft_note = w.HTML()
        self.draft_note.add_class("cfgzip-draft-note")
        check = self._button("Check now", "cfgzip-check", self.compile, where="compile", icon="check")
        self._setting_kind = False
        self.kind = w.Dropdown(
            options=[(label, value) for value, label in _KIND_LABELS.items()],
            value=session.input_kind,
            description="Input",
            tooltip="how the text is read: auto = a JSON object is a JSON Schema, a .gbnf file is GBNF, a .lark file "
            "or a text with a 'start:' rule is Lark, else EBNF (a regex is never guessed: choose regex)",
            layout=w.Layout(width="230px"),
        )
        self.kind.add_class("cfgzip-input-kind")
        self.kind.observe(self._on_kind, names="value")

        self.fallback_reason = ""
        if editor == "codemirror" and not bundle_available():
            editor, self.fallback_reason = "textarea", "the code editor's bundle is missing: plain text area"
        self.editor_kind = editor
        self.code_editor: CodeEditor | None = None
        if editor == "codemirror":
            self.code_editor = CodeEditor(value=session.text, height="480px", layout=w.Layout(width="100%"))
            self.text = self.code_editor
        else:
            self.text = w.Textarea(
                value=session.text, continuous_update=True, layout=w.Layout(width="100%", height="480px")
            )
        self.text.add_class("cfgzip-editor-text")
        self.text.observe(self._on_text, names="value")
        self.jump_list = w.VBox(layout=w.Layout(align_items="flex-start"))
        self.jump_list.add_class("cfgzip-jump-list")

        self.status = w.HTML()
        self.status.add_class("cfgzip-grammar-status")
        # each diagnostic is a link: a click puts the cursor on it, in the focused editor (issue 35.1)
        self.diagnostics = HtmlView()
        self.diagnostics.add_class("cfgzip-diagnostics")
        self.diagnostics.on_action("jump", lambda arg: self._handler("jump", lambda: self.jump_to(*_position(arg)))())
        self.diagnostics.on_action("fix", lambda arg: self._handler("fix", lambda: self.apply_fix(int(arg)))())
        self.xgrammar = w.HTML()
        self.xgrammar.add_class("cfgzip-xgrammar")

        # The EBNF the engines compile for a schema or a GBNF file, and what XGrammar made of a schema.
        self.converted_editor: CodeEditor | None = None
        if self.code_editor is not None:
            self.converted_editor = CodeEditor(value="", height="360px", read_only=True, layout=w.Layout(width="100%"))
            self.converted_text = self.converted_editor
        else:
            self.converted_text = w.Textarea(value="", disabled=True, layout=w.Layout(width="100%", height="360px"))
        self.converted_text.add_class("cfgzip-converted-text")
        self.schema_report = HtmlView()
        self.schema_report.add_class("cfgzip-schema-report")
        self.schema_report.on_rule(lambda name: self._handler("jump", lambda: self.session.jump_to_rule(name))())
        self.converted = w.Accordion(children=[w.VBox([self.schema_report, self.converted_text])], titles=("",))
        self.converted.add_class("cfgzip-converted")
        self.converted.selected_index = None
        self.converted.layout.display = "none"

        # the class count and compression of this version, re-classed after each good check
        self.live = LiveClassesView(session)
        side = w.VBox(
            [
                w.HTML("<b>cfgzip</b>"),
                self.status,
                self.live.widget,
                self.jump_list,
                self.diagnostics,
                w.HTML(f"<b>XGrammar {xgrammar_version.installed()}</b>"),
                self.xgrammar,
            ],
            layout=w.Layout(width="40%", padding="0 0 0 10px", overflow="auto", max_height="500px"),
        )
        # a scrolling column whose parts keep their height (in a flex column they shrank to a
        # sliver, the live class count and the jump buttons among them, issue 35.1 and 35.7)
        side.add_class("cfgzip-editor-side")
        self.widget = w.VBox(
            [
                w.HBox(
                    [self.bundled, self.path, load, save, undo, draft, check, self.kind],
                    layout=w.Layout(flex_flow="row wrap"),
                ),
                self.draft_note,
                w.HBox([w.Box([self.text], layout=w.Layout(width="60%")), side]),
                self.converted,
                self.error_box,
            ]
        )
        self.widget.add_class("cfgzip-editor")
        session.on("grammar", self._show_ours)
        session.on("grammar", self._show_converted)
        session.on("xgrammar", self._show_xgrammar)
        session.on("text", self._on_session_text)
        session.on("jump", self._on_jump)
        self._show_ours()
        self._show_xgrammar()

    # -- public methods (one per UI event) ---------------------------------------------

    def compile(self) -> bool:
        """Check and compile the text now (the "Check now" button; the debounce ends here)."""
        self._cancel_timer()
        self.session.set_text(self.text.value)
        return self.session.compile()

    def set_input_kind(self, kind: str) -> bool:
        """Read the text as ``kind`` (``"auto"`` or one of the input kinds: ``"ebnf"``, ``"lark"``, ``"regex"``...) and check it."""
        self.session.set_input_kind(kind)  # refuses an unknown kind before the dropdown shows it
        self._set_kind_dropdown(kind)
        return self.compile()

    def load_bundled(self, name: str) -> None:
        self.session.load_bundled(name)

    def load_file(self, path: str | None = None) -> None:
        self.session.load_file(path or self.path.value)

    def save_file(self, path: str | None = None):
        self.session.set_text(self.text.value)
        saved = self.session.save_file(path or self.path.value)
        self.path.value = str(saved)
        self.status.value = f'<span class="cfgzip-ok">saved</span> {esc(saved)}'
        return saved

    def undo_load(self) -> bool:
        return self.session.restore_previous()

    def restore_draft(self) -> bool:
        """Bring back the text typed at the last check from this notebook's draft file (after a
        kernel restart); the input kind comes back with it."""
        draft = self.session.draft()
        if not self.session.restore_draft():
            self.status.value = '<span class="cfgzip-muted">no draft saved yet</span>'
            return False
        self._set_kind_dropdown(self.session.input_kind)
        self.draft_note.value = (
            f'<span class="cfgzip-muted">draft restored ({esc(draft.describe())}); "Undo load" brings back '
            "the text it replaced</span>"
        )
        return True

    def show_draft_hint(self) -> None:
        """Say when this notebook's draft differs from the editor's text (drawn at start-up: after
        a kernel restart the typed text is one click away)."""
        draft = self.session.draft()
        if draft is None or draft.text == self.session.text:
            self.draft_note.value = ""
            return
        self.draft_note.value = (
            f'<span class="cfgzip-warn">a draft of this notebook is on disk</span> ({esc(draft.describe())}): '
            "press <b>Restore draft</b> to bring it back"
        )

    def _set_kind_dropdown(self, kind: str) -> None:
        self._setting_kind = True
        try:
            self.kind.value = kind
        finally:
            self._setting_kind = False

    def show_converted(self, open_it: bool = True) -> str:
        """Open "Grammar built from the schema" (or "converted from GBNF"): the EBNF the engines
        compile, read-only; returns it ("" for an EBNF input, which is its own)."""
        self._show_converted()
        if self.converted.layout.display != "none" and open_it:
            self.converted.selected_index = 0
        return self.converted_text.value

    def jump_to_rule(self, rule: str) -> dict | None:
        """Cursor to ``rule``'s definition: in the text typed, or in the converted grammar."""
        return self.session.jump_to_rule(rule)

    def jump_to(self, line: int, column: int = 1) -> dict[str, int] | None:
        """Cursor to ``line``/``column`` in the editor, scrolled into view and focused (a click on a
        diagnostic's button); None with the plain text area, which has no cursor to set."""
        if self.code_editor is None:
            return None
        return self.code_editor.jump_to(line, column)

    def quick_fixes(self) -> dict[int, QuickFix]:
        """The quick fixes of the last check, by the index of their diagnostic in
        ``session.diagnostics`` ("did you mean 'qty'?" and the other hints with one fix)."""
        s = self.session
        text = s.checked_text
        if text is None:
            return {}
        fixes = {i: quick_fix(d, text) for i, d in enumerate(s.diagnostics)}
        return {i: fix for i, fix in fixes.items() if fix is not None}

    def apply_fix(self, index: int) -> str:
        """Apply the quick fix of diagnostic ``index`` (its "Fix:" button) to the text, check it at
        once and put the cursor at the change; returns the new text."""
        s = self.session
        fix = self.quick_fixes().get(index)
        if fix is None:
            raise WorkbenchError(f"diagnostic {index} has no quick fix")
        if self.text.value != s.checked_text:
            raise WorkbenchError("the text changed since it was checked: check it again, then fix")
        text = fix.apply(s.checked_text)
        self._cancel_timer()
        self.text.value = text
        self.flush()
        if self.session.checked_text != text:  # the debounce was pending: check now
            self.compile()
        self.jump_to(*position_of(text, fix.start + len(fix.replacement)))
        return text

    def set_text(self, text: str) -> None:
        """What typing does: set the text and schedule a check after ``delay`` seconds."""
        self.text.value = text

    def flush(self) -> None:
        """Run a pending debounced check now (tests; also harmless when none is pending)."""
        if self._cancel_timer():
            self.compile()

    @property
    def pending(self) -> bool:
        return self._timer is not None

    # -- events -----------------------------------------------------------------------

    def _on_text(self, change) -> None:
        self.session.set_text(change["new"])
        if self._syncing:
            return
        self.draft_note.value = ""  # "draft restored …" or "a draft is on disk": said, and now typed over
        self.status.value = '<span class="cfgzip-muted">editing…</span>'
        if self.delay <= 0:
            self._guarded_compile()
            return
        with self._timer_lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.delay, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._timer_lock:
            self._timer = None
        self._guarded_compile()

    def _guarded_compile(self) -> None:
        try:
            self.session.compile()
        except Exception as exc:  # last resort: this may run in the debounce timer's thread
            self.session.record_error("compile", exc)

    def _cancel_timer(self) -> bool:
        with self._timer_lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        return timer is not None

    def _on_bundled(self, change) -> None:
        if change["new"] == _CHOOSE:
            return
        self._handler("load grammar", lambda: self.load_bundled(change["new"]))()
        self.bundled.value = _CHOOSE

    def _on_kind(self, change) -> None:
        if not self._setting_kind:
            self._handler("compile", lambda: self.set_input_kind(change["new"]))()

    def _on_session_text(self) -> None:
        """The session's text was replaced by a load: show it and check it."""
        self._cancel_timer()
        self._syncing = True
        try:
            self.text.value = self.session.text
        finally:
            self._syncing = False
        self._guarded_compile()

    def _on_jump(self) -> None:
        target = self.session.jump_target
        if not target:
            return
        if target["in"] == "converted":
            self.show_converted()
            if self.converted_editor is not None:
                self.converted_editor.jump_to(target["line"], target["column"])
        else:
            self.jump_to(target["line"], target["column"])

    # -- views ------------------------------------------------------------------------

    def _show_converted(self) -> None:
        s = self.session
        compiled = s.compiled if s.grammar_ok else None
        origin = compiled.grammar_source if compiled is not None else None
        if origin is None or origin.kind == "ebnf":
            self.converted.layout.display = "none"
            self.converted_text.value = ""
            self.schema_report.value = ""
            return
        if self.converted.layout.display == "none":  # just became a schema or GBNF: show what it became
            self.converted.selected_index = 0
        self.converted.layout.display = ""
        schema = origin.kind == "json_schema"
        self.converted.set_title(0, _CONVERTED_TITLES.get(origin.kind, _CONVERTED_TITLES["gbnf"]))
        self.converted_text.value = compiled.text
        if not schema:
            self.schema_report.value = ""
            return
        try:
            info = s.schema_info()
        except Exception as exc:  # a report must never break the editor
            s.record_error("schema", exc)
            return
        self.schema_report.value = _schema_report_html(info)

    def _show_ours(self) -> None:
        s = self.session
        text = s.checked_text or ""
        errors = [d for d in s.diagnostics if d.severity == "error"]
        warnings = [d for d in s.diagnostics if d.severity != "error"]
        if s.compiled is not None and s.checked_text == text:
            st = s.compiled.stats()
            took = sum(s.compiled.seconds.values())
            origin = s.compiled.grammar_source
            read_as = "" if origin is None or origin.kind == "ebnf" else f"{_KIND_LABELS[origin.kind]} → EBNF, "
            self.status.value = (
                f'<span class="cfgzip-ok">✓ compiles</span> in {fmt_seconds(took)}: {read_as}{st["rules"]:,} rules, '
                f"{st['gnf_nonterminals']:,} GNF nonterminals, {st['gnf_productions']:,} GNF productions"
                + (f', <span class="cfgzip-warn">{len(warnings)} warning(s)</span>' if warnings else "")
            )
            if origin is not None and origin.notes:
                self.status.value += "".join(f'<br><span class="cfgzip-muted">{esc(n)}</span>' for n in origin.notes)
        elif s.checked_text is None:
            self.status.value = '<span class="cfgzip-muted">not checked yet</span>'
        else:
            self.status.value = f'<span class="cfgzip-bad">✗ {len(errors)} error(s)</span>' + (
                f", {len(warnings)} warning(s)" if warnings else ""
            )
        if self.fallback_reason:
            self.status.value += f'<br><span class="cfgzip-muted">{esc(self.fallback_reason)}</span>'
        fixes = self.quick_fixes()
        self.diagnostics.value = "".join(
            diagnostic_html(d, text, fix=(i, fixes[i].label) if i in fixes else None)
            for i, d in enumerate(s.diagnostics)
        )
        self._show_marks()

    def marks(self) -> list[dict]:
        """The marks for the last checked text: our diagnostics, then XGrammar's position when it
        refused that same text (a verdict on an older text is left out, so fixed errors clear)."""
        s = self.session
        text = s.checked_text
        if text is None:
            return []
        marks = editor_marks(s.diagnostics, text)
        verdict = s.xgrammar
        if verdict is not None and s.xgrammar_text == text and not verdict.ok and verdict.line:
            marks.append(
                point_mark(
                    text,
                    verdict.line,
                    verdict.column or 1,
                    f"XGrammar: {verdict.message}",
                    source="XGrammar",
                    utf8=True,
                )
            )
        return marks

    def _show_marks(self) -> None:
        if self.code_editor is None:
            return
        with self._marks_lock:
            self._draw_marks(self.marks())

    def _draw_marks(self, marks: list[dict]) -> None:
        self.code_editor.diagnostics = marks
        buttons = []
        for mark in sorted(marks, key=lambda m: (m["severity"] != "error", m["line"], m["column"])):  # errors first
            message = mark["message"]
            label = message if len(message) <= _JUMP_LABEL else message[: _JUMP_LABEL - 1] + "…"
            button = w.Button(
                description=f"↪ {mark['line']}:{mark['column']} {label}",
                tooltip=f"line {mark['line']}, column {mark['column']}: {message} (click: cursor there)",
                layout=w.Layout(width="auto", max_width="100%"),
            )
            button.add_class("cfgzip-jump")
            button.add_class(f"cfgzip-jump-{mark['severity']}")
            button.on_click(
                self._handler("jump", lambda line=mark["line"], col=mark["column"]: self.jump_to(line, col))
            )
            buttons.append(button)
        old, self.jump_list.children = self.jump_list.children, buttons
        for button in old:
            button.close()  # or each check would leave its buttons' comms open in the kernel

    def _show_xgrammar(self) -> None:
        s = self.session
        verdict = s.xgrammar
        self._show_marks()
        if verdict is None or s.xgrammar_text != s.text:
            self.xgrammar.value = '<span class="cfgzip-muted">checking…</span>' if s.checked_text else ""
            return
        ours_ok = s.grammar_ok
        if verdict.ok:
            head = f'<span class="cfgzip-ok">✓ compiles</span> in {fmt_seconds(verdict.seconds)}'
        elif verdict.crashed:
            head = f'<span class="cfgzip-bad">✗ crashed</span> ({esc(verdict.message)}) — in a child process; the kernel is fine'
        else:
            where = f"<b>line {verdict.line}, column {verdict.column}</b>: " if verdict.line else ""
            head = f'<span class="cfgzip-bad">✗ refused</span>: {where}{esc(verdict.message)}'
        agree = (
            '<span class="cfgzip-ok">agrees with cfgzip</span>'
            if verdict.ok == ours_ok
            else '<span class="cfgzip-warn">disagrees with cfgzip</span>'
        )
        self.xgrammar.value = f"{head}<br>{agree}"


# the title of the read-only view of the EBNF an input becomes, per input kind
_CONVERTED_TITLES = {
    "json_schema": "Grammar built from the schema (XGrammar's EBNF, read-only): rules, JSON pointers, what it does not enforce",
    "structural_tag": "Grammar built from the structural tag (XGrammar's EBNF, read-only)",
    "gbnf": "Grammar converted from GBNF (the EBNF the engines compile, read-only)",
    "lark": "Grammar built from the Lark grammar (XGrammar's EBNF, read-only)",
    "regex": "Grammar built from the regex (XGrammar's EBNF, read-only)",
}


def _schema_report_html(info: dict) -> str:
    """What XGrammar made of a schema: notes, the order rule, costs, its warnings, rule → pointer."""
    parts = []
    notes = [n for n in info["notes"] if n.effect in ("ignored", "weakened")]
    stricter = [n for n in info["notes"] if n.effect == "stricter"]
    if notes:
        items = "".join(
            f'<li><span class="cfgzip-code">{esc(show_pointer(n.pointer))}</span> <b>{esc(n.keyword)}</b> '
            f'<span class="cfgzip-warn">{esc(n.effect)}</span>: {esc(n.message)}</li>'
            for n in notes
        )
        parts.append(
            f'<p><b>Keywords XGrammar does not enforce as written</b></p><ul class="cfgzip-schema-notes">{items}</ul>'
        )
    else:
        parts.append('<p class="cfgzip-muted">XGrammar enforces every keyword of this schema.</p>')
    rules = [info["order"]] + [n.message for n in stricter]
    parts.append(
        '<p><b>Rules of XGrammar\'s grammar to know</b></p><ul class="cfgzip-schema-rules">'
        + "".join(f"<li>{esc(r)}</li>" for r in rules)
        + "</ul>"
    )
    if info["costly"]:
        items = "".join(
            f'<li><span class="cfgzip-code">{esc(show_pointer(n.pointer))}</span> <b>{esc(n.keyword)}</b>: {esc(n.message)}</li>'
            for n in info["costly"]
        )
        parts.append(
            f'<p><b class="cfgzip-warn">Costly keywords</b> (what makes every check slow)</p><ul class="cfgzip-schema-costly">{items}</ul>'
        )
    if info["warnings"]:
        parts.append(
            "<p><b>XGrammar's own warnings</b></p><ul>"
            + "".join(f"<li>{esc(w)}</li>" for w in info["warnings"])
            + "</ul>"
        )
    rows = [
        [f'<span class="cfgzip-code" data-rule="{esc(rule)}">{esc(rule)}</span>', esc(show_pointer(pointer))]
        for rule, pointer in info["pointers"].items()
        if not rule.startswith("basic_")
    ]
    parts.append(
        "<details><summary>Rule names → JSON pointers (click a rule: its definition below)</summary>"
        + table(["rule", "enforces (JSON pointer)"], rows, css="cfgzip-schema-pointers")
        + "</details>"
    )
    return "".join(parts)
