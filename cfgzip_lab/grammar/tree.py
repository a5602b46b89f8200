"""The grammar AST produced by the EBNF front end and consumed by the lowering.

Every node keeps the source span it came from so that later stages (lowering,
the editor panel) can point at the text that caused a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Span = tuple[int, int]  # half-open character offsets in the grammar text


@dataclass(frozen=True, slots=True)
class Literal:
    """A string literal; ``text`` holds code points after escape processing. ``""`` is ε."""

    text: str
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class CharClass:
    """``[...]`` or ``[^...]``: inclusive code-point ranges, already unescaped."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class RuleRef:
    name: str
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Sequence:
    items: tuple[Expr, ...]
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Choice:
    options: tuple[Expr, ...]
    span: Span | None = None


@dataclass(frozen=True, slots=True)
class Repeat:
    """``e*`` is (0, None), ``e+`` (1, None), ``e?`` (0, 1), ``e{m}`` (m, m), ``e{m,}`` (m, None)."""

    item: Expr
    min: int
    max: int | None
    span: Span | None = None


Expr = Literal | CharClass | RuleRef | Sequence | Choice | Repeat


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    body: Expr
    span: Span | None = None


@dataclass
class GrammarAST:
    """Rules in source order; ``root`` names the start rule (always ``"root"`` for XGrammar)."""

    rules: dict[str, Rule]
    root: str = "root"
    text: str = ""
    warnings: list = field(default_factory=list)  # list[Diagnostic]
