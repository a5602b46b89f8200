"""Diagnostics shared by the CLI and the editor panel.

A diagnostic keeps structured data (1-based line and column, a source span) so
that every view can point at the problem itself instead of re-parsing a message.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Literal

from ..errors import CfgzipError

Severity = Literal["error", "warning", "info"]  # info tells, never blocks (left recursion rewritten)

#: Characters of a long line shown around the caret (the rest is cut, and the cut is counted).
LINE_WINDOW = 100


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in a grammar text.

    ``line`` and ``column`` are 1-based, like Python's SyntaxError. ``span`` is the
    half-open character range ``(start, end)`` in the source text, when known.
    """

    line: int
    column: int
    message: str
    severity: Severity = "error"
    span: tuple[int, int] | None = None

    def render(self, text: str | None = None, source: str = "<grammar>") -> str:
        """``source:line:column: severity: message`` plus the offending line and a caret.

        A line longer than :data:`LINE_WINDOW` is shown as a window around the caret, with
        ``…`` where it was cut and a last line that says how many characters were cut, so
        the caret stays under the error (a 3,500-character line printed whole loses it).
        """
        head = f"{source}:{self.line}:{self.column}: {self.severity}: {self.message}"
        if text is None:
            return head
        lines = text.splitlines()
        if not 1 <= self.line <= len(lines):
            return head
        code = lines[self.line - 1]
        caret = min(self.column - 1, len(code))
        if len(code) <= LINE_WINDOW:
            return f"{head}\n    {code}\n    {_padding(code[:caret])}^"
        start = max(0, min(caret - LINE_WINDOW // 2, len(code) - LINE_WINDOW))
        end = start + LINE_WINDOW
        before, after = "…" if start else "", "…" if end < len(code) else ""
        shown = before + code[start:end] + after
        pad = _padding(before + code[start:caret])
        cut = f"    (line {self.line} has {len(code):,} characters: {start:,} cut before, {len(code) - end:,} after)"
        return f"{head}\n    {shown}\n    {pad}^\n{cut}"


@dataclass(frozen=True, slots=True)
class QuickFix:
    """The one edit that fixes a diagnostic: ``text[start:end]`` becomes ``replacement``."""

    start: int
    end: int
    replacement: str
    label: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]


_DID_YOU_MEAN = re.compile(r"undefined rule '([^']+)'; did you mean '([^']+)'\?$")
_C_COMMENT = re.compile(r"unexpected '//': comments start with '#'")
_NEW_LINE = re.compile(r"rule '([^']+)' must start on a new line$")


def quick_fix(diagnostic: Diagnostic, text: str) -> QuickFix | None:
    """The fix of a diagnostic that has exactly one, for ``text`` (the text it was found in):
    a misspelt rule name ("undefined rule 'qyt'; did you mean 'qty'?": the name replaced), a
    ``//`` comment (``#`` instead), a rule head in the middle of a line (a line break before it).
    None for the others, or when ``text`` no longer has what the diagnostic points at.

    >>> d = Diagnostic(1, 10, "undefined rule 'qyt'; did you mean 'qty'?", span=(9, 12))
    >>> quick_fix(d, "root ::= qyt").apply("root ::= qyt")
    'root ::= qty'
    """
    span = diagnostic.span
    if span is None or not 0 <= span[0] <= span[1] <= len(text):
        return None
    start, end = span
    found = text[start:end]
    if match := _DID_YOU_MEAN.match(diagnostic.message):
        wrong, right = match.groups()
        return QuickFix(start, end, right, f"replace '{wrong}' with '{right}'") if found == wrong else None
    if _C_COMMENT.match(diagnostic.message) and found == "//":
        return QuickFix(start, end, "#", "write the comment with '#'")
    if (match := _NEW_LINE.match(diagnostic.message)) and found == match.group(1):
        cut = len(text[:start].rstrip(" \t"))
        return QuickFix(cut, start, "\n", f"start rule '{found}' on a new line")
    return None


def _padding(shown: str) -> str:
    """Spaces under ``shown``, tabs kept, so that a caret after it lines up in a terminal."""
    return "".join("\t" if c == "\t" else " " for c in shown)


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based ``(line, column)`` of a character offset in ``text``.

    The lowering asks this for every nonterminal it makes (its provenance), always of the same
    text: counting newlines up to each offset was half of ``lower`` on c_like (358 calls), so the
    line starts of the last text asked about are kept and searched by bisection.
    """
    global _last_lines
    if offset < 0:
        offset = 0
    elif offset > len(text):
        offset = len(text)
    known, starts = _last_lines
    if known is not text:
        starts = [0] + [match.end() for match in _NEWLINE.finditer(text)]
        _last_lines = (text, starts)
    line = bisect_right(starts, offset)
    return line, offset - starts[line - 1] + 1


_NEWLINE = re.compile("\n")
_last_lines: tuple[str | None, list[int]] = (None, [0])


@dataclass
class GrammarError(CfgzipError):
    """A grammar that cannot be used, with every diagnostic found (errors and warnings)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str | None = None
    source: str = "<grammar>"

    def __post_init__(self) -> None:
        super().__init__(self.render())

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def render(self) -> str:
        return "\n".join(d.render(self.text, self.source) for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()
