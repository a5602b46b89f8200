"""XGrammar's printed EBNF (``str(grammar)``), made to read back as the grammar it prints.

XGrammar prints a code point up to U+FF as ``\\xHH`` (two digits), but its parser, and ours
(``ebnf.py``), read ``\\x`` with *every* following hex digit. So ``"éa"`` prints as ``"\\xe9a"``,
which reads back as U+0E9A (``"ບ"``; seen with XGrammar 0.2.9, ``Grammar.from_ebnf(str(g))``
included). :func:`printed_ebnf` writes such an escape as ``\\u00HH`` instead when a hex digit
follows it; every other text is returned unchanged, so grammars without the clash keep their
text (and the cache keys made from it).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["printed_ebnf", "unambiguous_escapes"]

# An escape pair (\\, \", \x..) is consumed whole, so "\\x41" (a backslash, then x41) is left alone.
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}(?=[0-9a-fA-F])|.)", re.DOTALL)
# Only such an escape is rewritten, and each one holds this: a text without it is returned at once
# (a JSON Schema's EBNF has hundreds of escapes, \" and [ \n\r\t], each a Python call of the rewrite).
_MAYBE_CLASH = re.compile(r"\\x[0-9a-fA-F]{3}")


def unambiguous_escapes(text: str) -> str:
    """``text`` with each two-digit ``\\xHH`` that a hex digit follows written ``\\u00HH``
    (``"\\xe9a"`` becomes ``"\\u00e9a"``; ``"\\xe9"`` and an escaped backslash before ``x41`` stay)."""

    if _MAYBE_CLASH.search(text) is None:
        return text

    def one(m: re.Match) -> str:
        escape = m.group(1)
        return "\\u00" + escape[1:] if len(escape) == 3 else m.group(0)

    return _ESCAPE.sub(one, text)


def printed_ebnf(grammar: Any) -> str:
    """``str(grammar)`` of an ``xgrammar.Grammar``, its ``\\x`` escapes made unambiguous."""
    return unambiguous_escapes(str(grammar))
