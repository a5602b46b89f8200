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


@dataclass(frozen=True, slots=True)
class Automaton:
    """A finite automaton over bytes, as XGrammar builds one for a ``Regex(...)`` (see :mod:`.regex_fsm`).

    States are ``0 .. num_states-1``; ``edges`` are ``(source, label, target)`` where the label
    is a byte range ``(lo, hi)``, or an :class:`Expr` read as one step (a counted repetition of
    another automaton: XGrammar's sub-rule for a large ``{m,n}``). No ε-edges. The lowering
    makes one nonterminal per state (``Q → label Q'``, ``Q → ε`` for a final Q): a right-linear
    grammar with exactly the automaton's language. ``pattern`` is the regex it was built from.
    """

    num_states: int
    start: int
    finals: tuple[int, ...]
    edges: tuple[tuple[int, tuple[int, int] | Expr, int], ...]
    pattern: str = ""
    span: Span | None = None

    def nullable(self) -> bool:
        """Whether the automaton accepts ε (through finals or nullable sub-expression edges)."""
        seen, todo = {self.start}, [self.start]
        while todo:
            q = todo.pop()
            if q in self.finals:
                return True
            for source, label, target in self.edges:
                if source == q and not isinstance(label, tuple) and target not in seen and _nullable(label):
                    seen.add(target)
                    todo.append(target)
        return False


@dataclass(frozen=True, slots=True)
class TokenSet:
    """One whole token chosen by its vocabulary id: ``Token(i, …)`` takes a token whose id is
    listed, ``ExcludeToken(i, …)`` (``exclude``) any token whose id is not (stop and special
    tokens never). ``ids`` are sorted and distinct, as XGrammar keeps them. It never matches
    bytes: :mod:`.token_macros` lowers it to a token terminal.
    """

    ids: tuple[int, ...]
    exclude: bool = False
    span: Span | None = None


def _nullable(label: Expr) -> bool:
    if isinstance(label, Automaton):
        return label.nullable()
    if isinstance(label, Repeat):
        return label.min == 0 or _nullable(label.item)
    raise TypeError(f"unexpected automaton edge label {label!r}")


Expr = Literal | CharClass | RuleRef | Sequence | Choice | Repeat | Automaton | TokenSet


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
    #: Unreachable-rule warnings not made (``parse_ebnf(warn_unreachable=False)``): how many.
    hidden_warnings: int = 0
