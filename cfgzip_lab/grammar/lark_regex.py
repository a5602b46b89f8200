"""Lark grammars and bare regexes → XGrammar's EBNF, built by XGrammar itself.

Lark is the exchange format of LLM grammars (OpenAI's custom-tool grammars, llguidance) and a
bare regex is what vLLM's and SGLang's ``regex`` requests carry. cfgzip converts neither on its
own: ``xgrammar.Grammar.from_lark`` and ``xgrammar.Grammar.from_regex`` build the grammar and its
printed EBNF (``str(grammar)``) is what we class and what the plain engine compiles, as for a JSON
Schema (:mod:`.sources`). So the language is XGrammar's reading of the Lark grammar (its
``%ignore``, ``%import common``, terminal and priority semantics), and the masks stay XGrammar's.

Errors are placed in the author's text: XGrammar reports a Lark error as ``line L, column C``
(C counted in UTF-8 bytes, converted here to characters) and a regex error as a 1-based
``position`` in code points; where a regex message has no position (a bad ``{m,n}`` is reported by XGrammar's
EBNF parser), cfgzip's reading of the regex dialect (:mod:`.regex`) places it.

>>> source = lark_to_ebnf('start: "a" NUMBER\\nNUMBER: /[0-9]+/', "<lark>", None)   # doctest: +SKIP
>>> print(source.ebnf)                                                              # doctest: +SKIP
"""

from __future__ import annotations

import re

from .diagnostics import Diagnostic, GrammarError, position_of
from .printed import printed_ebnf

__all__ = ["lark_to_ebnf", "regex_to_ebnf", "looks_like_lark"]

# XGrammar's messages start with "[hh:mm:ss] /project/cpp/file.cc:123: " (also inside a Lark message).
_LOG_PREFIX = re.compile(r"\s*\[[0-9:]+\]\s+\S+\.cc:\d+:\s*")
_LARK_PLACE = re.compile(r"Lark error at line (?P<line>\d+), column (?P<column>\d+):\s*")
_REGEX_PLACE = re.compile(r"Regex parsing error at position (?P<position>\d+):\s*")
# A Lark rule or terminal definition at the start of a line: ``name:``, ``?name:``, ``!name:``,
# ``_NAME.2:`` (EBNF writes ``name ::=``, so ``name:`` never starts an EBNF line).
_LARK_DEFINITION = re.compile(r"^[ \t]*[?!]?[A-Za-z_][A-Za-z0-9_]*(\.-?\d+)?[ \t]*:(?!:=)", re.MULTILINE)
_LARK_DIRECTIVE = re.compile(r"^[ \t]*%(import|ignore|declare|override|extend)\b", re.MULTILINE)


def looks_like_lark(text: str) -> bool:
    """Whether ``text`` reads as a Lark grammar: no EBNF ``::=``, and a ``start:`` rule or a
    Lark directive (``%import``, ``%ignore``...). Used by :func:`.sources.detect_kind`."""
    if "::=" in text:
        return False
    if _LARK_DIRECTIVE.search(text):
        return True
    return any(m.group().strip().lstrip("?!").startswith("start") for m in _LARK_DEFINITION.finditer(text))


def lark_to_ebnf(text: str, source: str, name: str | None):
    """The Lark grammar ``text`` as XGrammar's EBNF (a :class:`~.sources.GrammarSource`).

    Raises
    ------
    GrammarError
        XGrammar's message, at the line and column of ``text`` it names.
    """
    import xgrammar

    from .sources import GrammarSource

    try:
        grammar = xgrammar.Grammar.from_lark(text)
    except Exception as error:  # XGrammar raises RuntimeError with its place in the message
        raise _lark_error(text, str(error), source) from None
    ebnf = printed_ebnf(grammar)
    notes = [
        "grammar built by XGrammar from the Lark grammar (xgrammar.Grammar.from_lark); "
        f"{_rules(ebnf)} rules of XGrammar's EBNF are classed"
    ]
    return GrammarSource(ebnf, "lark", notes, text, name)


def regex_to_ebnf(text: str, source: str, name: str | None):
    """The regex ``text`` (the whole text is the pattern) as XGrammar's EBNF.

    Raises
    ------
    GrammarError
        XGrammar's message, at the pattern's character it names (line and column of ``text``).
    """
    import xgrammar

    from .sources import GrammarSource

    try:
        grammar = xgrammar.Grammar.from_regex(text)
    except Exception as error:
        raise _regex_error(text, str(error), source) from None
    ebnf = printed_ebnf(grammar)
    notes = [
        "grammar built by XGrammar from the regex (xgrammar.Grammar.from_regex); "
        f"{_rules(ebnf)} rules of XGrammar's EBNF are classed"
    ]
    return GrammarSource(ebnf, "regex", notes, text, name)


def _rules(ebnf: str) -> int:
    return sum("::=" in line for line in ebnf.splitlines())


def _clean(message: str) -> str:
    """XGrammar's message without its log prefixes and the echoed source line and caret."""
    first = message.strip().split("\n\n")[0].splitlines()[0] if message.strip() else "unknown error"
    return _LOG_PREFIX.sub(" ", first).strip()


def _char_offset(text: str, line: int, byte_column: int) -> int:
    """The character offset of 1-based ``line`` and 1-based UTF-8 byte column ``byte_column``."""
    lines = text.split("\n")
    line = min(max(line, 1), len(lines))
    start = sum(len(x) + 1 for x in lines[: line - 1])
    prefix = lines[line - 1].encode("utf-8")[: max(byte_column - 1, 0)]
    return start + len(prefix.decode("utf-8", errors="ignore"))


def _placed(text: str, offset: int, message: str, source: str) -> GrammarError:
    offset = min(max(offset, 0), len(text))
    line, column = position_of(text, offset)
    return GrammarError([Diagnostic(line, column, message, span=(offset, offset + 1))], text, source)


def _lark_error(text: str, raw: str, source: str) -> GrammarError:
    place = _LARK_PLACE.search(raw)
    message = _clean(raw[place.end() :] if place else raw)
    offset = _char_offset(text, int(place["line"]), int(place["column"])) if place else 0
    return _placed(text, offset, f"XGrammar cannot read this Lark grammar: {message}", source)


def _regex_error(text: str, raw: str, source: str) -> GrammarError:
    place = _REGEX_PLACE.search(raw)
    message = _clean(raw[place.end() :] if place else raw)
    if place:
        offset = int(place["position"]) - 1  # 1-based, in code points (past the end: the end)
    else:
        offset = _our_regex_offset(text)
    return _placed(text, offset, f"XGrammar cannot read this regex: {message}", source)


def _our_regex_offset(pattern: str) -> int:
    """Where cfgzip's reading of XGrammar's regex dialect finds the pattern's problem (0 if none)."""
    from .regex import RegexError, regex_to_expr

    try:
        regex_to_expr(pattern)
    except RegexError as error:
        return error.start
    return 0
