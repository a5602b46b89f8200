"""Where XGrammar's mask may hold tokens its own matcher refuses: a regex repetition past 128.

XGrammar turns a regex repetition with a bound above 128 (``[...]{1,200}``) into a sub-rule behind a
counted repeat edge (:mod:`.regex_fsm`). Its matcher runs that edge as the language says, and cfgzip's
walks follow the matcher; but the token mask XGrammar builds there can hold tokens the matcher then
refuses. Found on MaskBench's full run (Github_hard o79409, the ``name`` pattern
``^[A-Za-z\\u00aa…@]{1,200}$``: after ``"name": "`` XGrammar's mask holds 2,420 tokens such as
`` {`` and ``.\\n\\n`` that its ``accept_token`` refuses; the same class with ``+``, ``{1,128}`` or
``{1,129}`` gives no such token, with ``{200}`` it does; XGrammar 0.2.8 and 0.2.9 alike). What
exactly in the mask's construction lets them in is not mirrored here, so the serving path does not
guess: a grammar with such a repetition in a ``Regex`` is served by XGrammar itself, as a nested root
is (:mod:`.nested_root`), and the compressed engine refuses it. The check is a scan of the EBNF's
``Regex("...")`` literals, a superset of the cases seen (a literal ``\\{200}`` counts too).
"""

from __future__ import annotations

import re

from .diagnostics import Diagnostic, position_of
from .regex_fsm import LARGE_REPEAT_THRESHOLD

__all__ = ["LARGE_REPEAT_REASON", "large_repeat_in_text"]

LARGE_REPEAT_REASON = (
    "a regex repetition with a bound above {threshold} ({bound}): XGrammar builds it as a counted sub-rule, "
    "where its token mask can hold tokens its own matcher then refuses; cfgzip's walks follow the matcher, "
    "so this grammar's masks come from XGrammar itself over the whole vocabulary. Bounds up to {threshold} "
    "(or an unbounded + / *) let the native engine serve it"
)

_REGEX_LITERAL = re.compile(r'Regex\("((?:[^"\\]|\\.)*)"')
_BOUND = re.compile(r"\{(\d+)(,(\d*))?\}")


def large_repeat_in_text(text: str) -> Diagnostic | None:
    """The first ``Regex("...")`` of an EBNF text holding a repetition bound above
    :data:`~.regex_fsm.LARGE_REPEAT_THRESHOLD`, as a diagnostic at that literal; None where there is
    none (a ``str.find`` first: most grammars hold no ``Regex`` at all)."""
    if text.find("Regex(") < 0:
        return None
    for literal in _REGEX_LITERAL.finditer(text):
        for bound in _BOUND.finditer(literal.group(1)):
            low, high = int(bound.group(1)), bound.group(3)
            top = int(high) if high else None
            if (top is not None and top > LARGE_REPEAT_THRESHOLD) or (top is None and low > LARGE_REPEAT_THRESHOLD):
                line, column = position_of(text, literal.start())
                message = LARGE_REPEAT_REASON.format(threshold=LARGE_REPEAT_THRESHOLD, bound=bound.group(0))
                return Diagnostic(line, column, message)
    return None
