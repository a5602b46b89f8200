"""Where XGrammar's mask holds tokens its own matcher refuses: a character class repeated past 128.

XGrammar unrolls a repetition with bounds up to 128; past that (``r{1,200}``, ``[a-z ]{129}``,
``r{130,}``, and a ``Regex`` repetition, which becomes a sub-rule) it keeps a counted repeat edge,
and where the repeated element is a plain character class its token mask takes a fast path
(``FindCountedRepetitionBodies`` / ``ClassifyRepetitionToken`` in its ``compiled_grammar.cc``) that
admits tokens its matcher then refuses: with ``root ::= "\\"" r{1,200} "\\""`` and
``r ::= [a-z ]`` the mask after ``"`` holds `` \\xe0`` and `` \\xf0`` (partial UTF-8 tokens that
``accept_token`` refuses); with MaskBench Github_hard o79409's ``name`` pattern (a class of ~500
Unicode ranges with a space in it, ``{1,200}``) it holds 2,420 tokens such as `` {`` and ``.\\n\\n``.
``{1,128}``, ``+``, ``{100,}`` and a body that is a choice or a sequence give no such token; the same
in XGrammar 0.2.8 and 0.2.9. Found by the full 10,282-file MaskBench run (4 of 2,752,397 masks
differed, all in o79409); 553 of MaskBench's schemas hold such a repetition.

cfgzip's walks follow the matcher, and the fast path's exact admissions are not mirrored yet, so the
serving path does not guess: such a grammar is served by XGrammar itself, as a nested root is
(:mod:`.nested_root`), and the compressed engine refuses it. The check reads the EBNF text and errs
on the side of falling back: a repetition past 128 of a class (``[...]{...}``), of a group, of a rule
whose definition line is a single class (or cannot be read as anything else), and any ``Regex`` with
such a bound; a bound inside a string literal counts too.
"""

from __future__ import annotations

import re

from .diagnostics import Diagnostic, position_of
from .regex_fsm import LARGE_REPEAT_THRESHOLD

__all__ = ["LARGE_REPEAT_REASON", "large_repeat_in_text"]

LARGE_REPEAT_REASON = (
    "a character class repeated with a bound above {threshold} ({bound}): XGrammar keeps it as a counted "
    "repetition, where its token mask holds tokens its own matcher then refuses; cfgzip's walks follow the "
    "matcher, so this grammar's masks come from XGrammar itself over the whole vocabulary. Bounds up to "
    "{threshold} (or an unbounded + / *) let the native engine serve it"
)

_REGEX_LITERAL = re.compile(r'Regex\("((?:[^"\\]|\\.)*)"')
_BOUND = re.compile(r"\{\s*(\d+)\s*(,\s*(-?\d*)\s*)?\}")
_NAME_BEFORE = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)$")
_SINGLE_CLASS = re.compile(r"\(*\s*\[(?:[^\]\\]|\\.)*\]\s*\)*")


def large_repeat_in_text(text: str) -> Diagnostic | None:
    """The first repetition of an EBNF text that may take XGrammar's counted-class fast path (a bound above
    :data:`~.regex_fsm.LARGE_REPEAT_THRESHOLD` on a class, a group, a class rule, or inside a ``Regex``), as
    a diagnostic at it; None where there is none (a ``str.find`` first: most grammars hold no ``{``)."""
    if text.find("{") < 0:
        return None
    for bound in _BOUND.finditer(text):
        if _large(bound) and _repeats_a_class(text, bound.start()):
            return _diagnostic(text, bound.start(), bound.group(0))
    for literal in _REGEX_LITERAL.finditer(text):
        for bound in _BOUND.finditer(literal.group(1)):
            if _large(bound):
                return _diagnostic(text, literal.start(), bound.group(0))
    return None


def _large(bound: re.Match) -> bool:
    low, comma, high = int(bound.group(1)), bound.group(2), bound.group(3)
    top = int(high) if comma and high not in ("", "-1") else None
    if comma is None:  # {n}
        return low > LARGE_REPEAT_THRESHOLD
    return top > LARGE_REPEAT_THRESHOLD if top is not None else low > LARGE_REPEAT_THRESHOLD


def _repeats_a_class(text: str, at: int) -> bool:
    """Whether what stands before the ``{`` at ``at`` may be a plain class: a class or a group itself, or
    a rule whose definition line is one class, or is not found (then it may be one: fall back); a string
    literal is not."""
    before = text[max(0, at - 1000) : at].rstrip()  # a window: a long text may hold many bounds
    if before.endswith(("]", ")")):
        return True
    if before.endswith('"'):  # a string literal: a byte string, never a class in XGrammar
        return False
    name = _NAME_BEFORE.search(before)
    if name is None:
        return True
    definition = re.search(rf"(?m)^\s*{re.escape(name.group(1))}\s*::=\s*(.*)$", text)
    if definition is None:
        return True
    body = definition.group(1).strip()
    return not body or _SINGLE_CLASS.fullmatch(body) is not None


def _diagnostic(text: str, offset: int, bound: str) -> Diagnostic:
    line, column = position_of(text, offset)
    return Diagnostic(line, column, LARGE_REPEAT_REASON.format(threshold=LARGE_REPEAT_THRESHOLD, bound=bound))
