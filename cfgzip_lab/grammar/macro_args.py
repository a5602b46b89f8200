"""The arguments of a macro call (``TagDispatch(...)``, ``Substring(...)``), read as XGrammar reads them.

XGrammar's parser (``ParseMacroArguments`` / ``ParseMacroValue`` in ``cpp/grammar_parser.cc``,
the same in 0.2.8) reads ``( [arg (, arg)*] )`` where an argument is ``name = value`` or a
value, and a value is a string, an integer, ``true``/``false``, a name, or a tuple
``( [value (, value)* [,]] )`` (a trailing comma only inside a tuple; ``("a")`` is a 1-tuple).
A repeated named argument keeps its last value. The errors are XGrammar's, pointed at the
token where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal as Kind

from .ebnf_syntax import Nested, Tok
from .tree import Span

__all__ = ["MacroValue", "MacroArguments", "MacroArgumentError", "read_arguments"]

_VALUE_EXPECTED = "Expect string, integer, boolean, or tuple in macro argument"


@dataclass(frozen=True, slots=True)
class MacroValue:
    """One value: ``kind`` says which; ``token`` is the string's, integer's or name's token;
    ``elements`` a tuple's values; ``span`` covers the value in the grammar text."""

    kind: Kind["string", "integer", "boolean", "identifier", "tuple"]
    span: Span
    token: Tok | None = None
    elements: tuple[MacroValue, ...] = ()

    @property
    def boolean(self) -> bool:
        return self.token is not None and self.token.value == "true"


@dataclass(slots=True)
class MacroArguments:
    positional: list[MacroValue] = field(default_factory=list)
    named: dict[str, MacroValue] = field(default_factory=dict)
    name_spans: dict[str, Span] = field(default_factory=dict)  # where each named argument's name is


class MacroArgumentError(Exception):
    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.message = message
        self.span = span


def read_arguments(args: list[Tok | Nested], rpar: Tok) -> MacroArguments:
    """The arguments between a macro's parentheses (``rpar`` is the closing one)."""
    out = MacroArguments()
    items = [*args, rpar]
    i = 0
    if items[0] is rpar:
        return out
    while True:
        item = items[i]
        following = items[i + 1] if item is not rpar else None
        if isinstance(item, Tok) and item.type in ("NAME", "MACRO") and item.value not in ("true", "false"):
            if isinstance(following, Tok) and following.type == "EQUAL":
                value, i = _value(items, i + 2)
                out.named[item.value] = value
                out.name_spans[item.value] = (item.start_pos, item.end_pos)
            else:
                value, i = _value(items, i)
                out.positional.append(value)
        else:
            value, i = _value(items, i)
            out.positional.append(value)
        item = items[i]
        if item is rpar:
            return out
        if isinstance(item, Tok) and item.type == "COMMA":
            i += 1
            continue
        raise MacroArgumentError("Expect , or ) in macro arguments", _span(item))


def _value(items: list[Tok | Nested], i: int) -> tuple[MacroValue, int]:
    """The value at ``items[i]`` and the index after it."""
    item = items[i]
    if isinstance(item, Nested):
        return _tuple(item), i + 1
    span = (item.start_pos, item.end_pos)
    if item.type == "RPAR":  # after a trailing comma at the top level (a Nested has no RPAR item)
        raise MacroArgumentError(_VALUE_EXPECTED, span)
    if item.type == "STRING":
        return MacroValue("string", span, item), i + 1
    if item.type == "INT":
        return MacroValue("integer", span, item), i + 1
    if item.type in ("NAME", "MACRO"):
        kind = "boolean" if item.value in ("true", "false") else "identifier"
        return MacroValue(kind, span, item), i + 1  # type: ignore[arg-type]
    raise MacroArgumentError(_VALUE_EXPECTED, span)


def _tuple(nested: Nested) -> MacroValue:
    items = [*nested.args, nested.rpar]
    elements: list[MacroValue] = []
    i = 0
    while items[i] is not nested.rpar:
        value, i = _value(items, i)
        elements.append(value)
        item = items[i]
        if isinstance(item, Tok) and item.type == "COMMA":
            i += 1
        elif item is not nested.rpar:
            raise MacroArgumentError("Expect , or ) in tuple", _span(item))
    return MacroValue("tuple", (nested.lpar.start_pos, nested.rpar.end_pos), elements=tuple(elements))


def _span(item: Tok | Nested) -> Span:
    if isinstance(item, Nested):
        return (item.lpar.start_pos, item.rpar.end_pos)
    return (item.start_pos, item.end_pos)
