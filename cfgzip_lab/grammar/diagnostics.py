"""Diagnostics shared by the CLI and the editor panel.

A diagnostic keeps structured data (1-based line and column, a source span) so
that every view can point at the problem itself instead of re-parsing a message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..errors import CfgzipError

Severity = Literal["error", "warning"]


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
        """``source:line:column: severity: message`` plus the offending line and a caret."""
        head = f"{source}:{self.line}:{self.column}: {self.severity}: {self.message}"
        if text is None:
            return head
        lines = text.splitlines()
        if not 1 <= self.line <= len(lines):
            return head
        code = lines[self.line - 1]
        return f"{head}\n    {code}\n    {' ' * (self.column - 1)}^"


def position_of(text: str, offset: int) -> tuple[int, int]:
    """1-based ``(line, column)`` of a character offset in ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


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
