"""The grammar editor's text field: CodeMirror 6 in an anywidget.

>>> editor = CodeEditor(value='root ::= "a"')          # doctest: +SKIP
>>> editor.diagnostics = editor_marks(diagnostics, text) # underlines, hover text  # doctest: +SKIP
>>> editor.jump_to(3, 7)                                 # cursor there, scrolled, focused  # doctest: +SKIP

The front end (``js/src/code_editor.js``, bundled with CodeMirror into the committed
``static/code_editor.js``; see ``js/build.mjs``) only translates: every edit sets ``value``,
every cursor move sets ``cursor``, ``diagnostics`` become lint marks, and :meth:`CodeEditor.jump_to`
sends the one message it acts on. Nothing is fetched at run time.

Positions are 1-based lines and columns counted in code points, as
:func:`cfgzip_lab.grammar.diagnostics.position_of` counts them; the front end converts
them to CodeMirror's UTF-16 offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from ..errors import CfgzipError
from ..grammar.diagnostics import Diagnostic, position_of, quick_fix

__all__ = ["CodeEditor", "CodeEditorUnavailable", "BUNDLE", "bundle_available", "editor_marks", "point_mark"]

#: the committed front end; ``cd js && npm ci && npm run build`` rewrites it
BUNDLE = Path(__file__).resolve().parent / "static" / "code_editor.js"

_MARK_KEYS = ("line", "column", "end_line", "end_column")


class CodeEditorUnavailable(CfgzipError, RuntimeError):
    """The editor's front-end bundle is missing (a checkout where it was deleted or not built):
    the editor panel falls back to a plain text area."""


def bundle_available() -> bool:
    return BUNDLE.is_file()


def _offset_of(text: str, line: int, column: int) -> int:
    """Character offset of 1-based (line, column) in ``text``, clamped to the line and the text."""
    lines = text.split("\n")
    line = min(max(1, line), len(lines))
    start = sum(len(piece) + 1 for piece in lines[: line - 1])
    return start + min(max(1, column), len(lines[line - 1]) + 1) - 1


def _mark(text: str, start: int, end: int, message: str, severity: str, source: str) -> dict[str, Any]:
    start = max(0, min(start, len(text)))
    end = max(start, min(end, len(text)))
    if end > start + 1 and text[end - 1] == "\n":
        end -= 1  # a span that takes in its line's end underlines that line only
    if end == start and start < len(text) and text[start] != "\n":
        end = start + 1  # an empty span inside a line: underline the character it points at
    # (an empty span at a line's end stays empty: CodeMirror draws a point marker there)
    line, column = position_of(text, start)
    end_line, end_column = position_of(text, end)
    return {
        "line": line,
        "column": column,
        "end_line": end_line,
        "end_column": end_column,
        "severity": severity,
        "message": message,
        "source": source,
    }


def editor_marks(diagnostics: Iterable[Diagnostic], text: str, *, source: str = "cfgzip") -> list[dict[str, Any]]:
    """The editor's ``diagnostics`` for ``diagnostics`` found in ``text``.

    A diagnostic's span (half-open character offsets) gives the underlined range; one
    without a span, or with an empty one, marks the character at its line and column (a
    point marker at a line's end). A span that ends with its line's newline stops before it.
    Offsets outside the text are clamped, never refused: the text may have changed since.
    A diagnostic with a quick fix (:func:`~cfgzip_lab.grammar.diagnostics.quick_fix`) carries it
    as ``fix``: the range replaced, ``found`` (its text), ``replacement`` and ``label``; the
    front end offers it as a button in the hover text.
    """
    marks = []
    for d in diagnostics:
        if d.span is not None:
            start, end = d.span
        else:
            start = end = _offset_of(text, d.line, d.column)
        mark = _mark(text, start, end, d.message, d.severity, source)
        fix = quick_fix(d, text)
        if fix is not None:
            (line, column), (end_line, end_column) = position_of(text, fix.start), position_of(text, fix.end)
            mark["fix"] = {
                "line": line,
                "column": column,
                "end_line": end_line,
                "end_column": end_column,
                "found": text[fix.start : fix.end],
                "replacement": fix.replacement,
                "label": fix.label,
            }
        marks.append(mark)
    return marks


def point_mark(
    text: str, line: int, column: int, message: str, *, source: str, severity: str = "error", utf8: bool = False
) -> dict[str, Any]:
    """A mark for a position without a span (XGrammar reports only a line and a column).

    ``utf8=True``: ``column`` counts UTF-8 bytes, as XGrammar's parser does (``"éé" x`` puts
    ``x`` at column 17 where we count 15); it is converted to code points first.
    """
    if utf8:
        lines = text.split("\n")
        if 1 <= line <= len(lines):
            head = lines[line - 1].encode("utf-8")[: max(0, column - 1)]
            column = len(head.decode("utf-8", "ignore")) + 1
    start = _offset_of(text, line, column)
    return _mark(text, start, start, message, severity, source)


class CodeEditor(anywidget.AnyWidget):
    """A CodeMirror 6 editor for XGrammar's EBNF.

    Synced traits: ``value`` (the text), ``diagnostics`` (marks: dicts with ``line``,
    ``column``, ``end_line``, ``end_column``, ``severity``, ``message`` and optionally
    ``source``; see :func:`editor_marks`), ``cursor`` (``{"line", "column"}`` of the
    selection head, set by the front end), ``height`` (CSS) and ``read_only`` (a text to
    read, not to edit). The features are the front end's: line numbers, EBNF highlighting,
    bracket matching, auto-closed ``" [ ( {`` outside strings and classes only, Tab indents
    (Esc then Tab, or Ctrl-M, moves focus on), undo/redo, search, lint underlines with hover
    text drawn outside the editor's clip box.

    Raises
    ------
    CodeEditorUnavailable
        When the bundle (:data:`BUNDLE`) is missing.
    """

    value = t.Unicode("").tag(sync=True)
    diagnostics = t.List(t.Dict()).tag(sync=True)
    cursor = t.Dict({"line": 1, "column": 1}).tag(sync=True)
    height = t.Unicode("480px").tag(sync=True)
    read_only = t.Bool(False).tag(sync=True)

    def __init__(self, value: str = "", **kwargs) -> None:
        if not bundle_available():
            raise CodeEditorUnavailable(
                f"the code editor's bundle {BUNDLE} is missing; rebuild it with `cd js && npm ci && npm run build`"
            )
        # Read here, not as a class attribute: anywidget would open the file at import time and
        # fail there when it is missing, before the panel could fall back to a text area.
        self._esm = BUNDLE.read_text(encoding="utf-8")
        super().__init__(value=value, **kwargs)

    @t.validate("diagnostics")
    def _check_marks(self, proposal) -> list[dict]:
        marks = []
        for i, mark in enumerate(proposal["value"]):
            try:
                line, column = int(mark["line"]), int(mark["column"])
                message = str(mark["message"])
            except (KeyError, TypeError, ValueError) as exc:
                raise t.TraitError(
                    f"diagnostics[{i}] needs integer 'line' and 'column' and a 'message' (got {mark!r})"
                ) from exc
            fixed = dict(mark, line=line, column=column, message=message)
            fixed["end_line"] = int(mark.get("end_line", line))
            fixed["end_column"] = int(mark.get("end_column", column))
            fixed.setdefault("severity", "error")
            marks.append(fixed)
        return marks

    def jump_to(self, line: int, column: int = 1) -> dict[str, int]:
        """Put the cursor on ``line`` and ``column`` (1-based, clamped to the text), scroll it
        into view and focus the editor (what a click on a diagnostic does). Returns the position."""
        offset = _offset_of(self.value, int(line), int(column))
        line, column = position_of(self.value, offset)
        self.cursor = {"line": line, "column": column}
        self.send({"type": "jump", "line": line, "column": column})
        return dict(self.cursor)
