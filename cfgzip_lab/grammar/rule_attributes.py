"""Rule attributes ``name[lazy, max_chars=8, temperature=0.7, capture="x"] ::= ...``, read as XGrammar.

XGrammar's lexer reads the block character by character (``cpp/grammar_parser.cc``): attributes
separated by commas, spaces and tabs around them, each at most once, keywords tried in a fixed
order and matched as prefixes (so ``capture_hidden_suffix_bytes`` is tried before ``capture``).
A block it cannot read is not an attribute block for it, and the grammar is then an error;
:func:`read_attributes` says so with the reason. What each attribute means in 0.2.8 and 0.2.9 (the
same in both; checked with its ``GrammarMatcher``, ``tests/test_rule_attributes.py`` runs under
each) and what cfgzip does with it:

========================================  =====================================================
``max_tokens=N``                          at most N *tokens* in the rule: depends on the
                                          tokenizer, not on bytes: refused
``max_chars=N``                           at most N code points per occurrence: exact when the
                                          rule's language is regular (a byte DFA, cut by a counter)
``lazy``                                  the occurrence ends at the first place its body can end
                                          (committed shortest): exact when regular
``temperature=T``                         sampling temperature inside the rule: the masks do not
                                          change, so it is accepted with a warning
``capture``, ``capture="x"``,             record what the rule matched (``GetCaptures``): the
``stop_capture="m"``,                     language does not change, accepted with a warning
``capture_hidden_suffix_bytes=N``, ...
========================================  =====================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["RuleAttributes", "AttributeError_", "read_attributes", "INT32_MAX"]

INT32_MAX = 2**31 - 1
_FLOAT_MAX = 3.4028234663852886e38  # std::numeric_limits<float>::max()

# (keyword, kind of value), in the order XGrammar tries them.
_KEYWORDS = (
    ("max_tokens", "integer"),
    ("max_chars", "integer"),
    ("capture_hidden_suffix_bytes", "integer"),
    ("capture_hidden_stop_bytes", "integer"),
    ("capture_hidden_body_rule_id", "integer"),
    ("capture_hidden_marker_rule_id", "integer"),
    ("stop_capture", "string"),
    ("capture", "capture"),
    ("lazy", "flag"),
    ("temperature", "float"),
)
_FLOAT_CHARS = re.compile(r"[0-9.eE+\-]*")
# What std::stod reads from the front of a string of _FLOAT_CHARS (it parses the longest prefix).
_STOD_PREFIX = re.compile(r"[+\-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+\-]?[0-9]+)?")


@dataclass(slots=True)
class RuleAttributes:
    """The attributes of one rule; ``values`` maps each keyword given to its value
    (``True`` for ``lazy``; the rule's own name for a bare ``capture``)."""

    values: dict[str, object] = field(default_factory=dict)

    def __contains__(self, keyword: str) -> bool:
        return keyword in self.values

    def __getitem__(self, keyword: str) -> object:
        return self.values[keyword]


class AttributeError_(Exception):  # noqa: N801 (not the builtin AttributeError)
    """The block is not one XGrammar reads, or a value it refuses; ``message`` says which."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unknown = unknown  # a keyword XGrammar does not know (else a value or a repeat)


def read_attributes(block: str, rule_name: str) -> RuleAttributes:
    """The attributes of ``block`` (``"[lazy, max_chars=3]"``, brackets included)."""
    text = block[1:-1]
    out = RuleAttributes()
    at = 0

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t":
            at += 1
        return at

    while True:
        at = skip(at)
        found = next((kw for kw in _KEYWORDS if kw[0] not in out.values and text.startswith(kw[0], at)), None)
        if found is None:
            raise _unreadable(text, at, out)
        keyword, kind = found
        at += len(keyword)
        if kind == "flag":
            out.values[keyword] = True
        elif kind == "capture" and text[skip(at) : skip(at) + 1] != "=":
            out.values[keyword] = rule_name
        else:
            at = skip(at)
            if text[at : at + 1] != "=":
                raise AttributeError_(f"{keyword} needs a value: {keyword}=...")
            at = skip(at + 1)
            value, at = _VALUE_READERS[kind](text, at, keyword)
            out.values[keyword] = value
        at = skip(at)
        if text[at : at + 1] == ",":
            at += 1
            continue
        break
    if at != len(text):
        raise AttributeError_(f"unexpected {text[at:]!r} in the rule attributes (attributes are separated by commas)")
    _check(out)
    return out


def _integer(text: str, at: int, keyword: str) -> tuple[int, int]:
    digits = re.match(r"[0-9]*", text[at:]).group()  # type: ignore[union-attr]
    if not digits or len(digits) > 10:  # XGrammar reads at most 10 digits
        raise AttributeError_(f"{keyword} must be a non-negative integer of at most 10 digits")
    return int(digits), at + len(digits)


def _string(text: str, at: int, keyword: str) -> tuple[str, int]:
    if text[at : at + 1] != '"':
        raise AttributeError_(f'{keyword} must be a double-quoted name: {keyword}="..."')
    end = text.find('"', at + 1)
    if end < 0 or "\\" in text[at + 1 : end]:
        raise AttributeError_(f"{keyword} must be a double-quoted name without escapes")
    return text[at + 1 : end], end + 1


def _float(text: str, at: int, keyword: str) -> tuple[float, int]:
    chars = _FLOAT_CHARS.match(text, at).group()  # type: ignore[union-attr]
    number = _STOD_PREFIX.match(chars)
    if not chars or number is None:
        raise AttributeError_(f"{keyword} must be a number")
    try:
        value = float(number.group())
    except OverflowError:  # pragma: no cover - float() gives inf instead
        value = math.inf
    return value, at + len(chars)


_VALUE_READERS = {"integer": _integer, "string": _string, "capture": _string, "float": _float}


def _unreadable(text: str, at: int, seen: RuleAttributes) -> AttributeError_:
    word = re.match(r"[A-Za-z_]*", text[at:]).group()  # type: ignore[union-attr]
    if word in seen.values:
        return AttributeError_(f"{word} is given twice")
    known = ", ".join(keyword for keyword, _ in _KEYWORDS)
    return AttributeError_(f"XGrammar 0.2.8 knows {known}", unknown=True)


def _check(attributes: RuleAttributes) -> None:
    """XGrammar's checks after reading the block, with its reasons."""
    values = attributes.values
    if values.get("capture") == "":
        raise AttributeError_("the capture name must not be empty")
    if values.get("stop_capture") == "":
        raise AttributeError_("the stop capture name must not be empty")
    if ("capture_hidden_body_rule_id" in values) != ("capture_hidden_marker_rule_id" in values):
        raise AttributeError_("capture_hidden_body_rule_id and capture_hidden_marker_rule_id go together")
    for keyword in ("capture_hidden_suffix_bytes", "capture_hidden_stop_bytes"):
        if keyword in values and values[keyword] <= 0:  # type: ignore[operator]
            raise AttributeError_(f"{keyword} must be positive")
    for keyword in ("max_chars", "capture_hidden_suffix_bytes", "capture_hidden_stop_bytes",
                    "capture_hidden_body_rule_id", "capture_hidden_marker_rule_id"):  # fmt: skip
        if keyword in values and values[keyword] > INT32_MAX:  # type: ignore[operator]
            raise AttributeError_(f"{keyword}={values[keyword]} is too large (at most 2**31-1)")
    temperature = values.get("temperature")
    if temperature is not None and not (math.isfinite(temperature) and 0 <= temperature <= _FLOAT_MAX):  # type: ignore[arg-type]
        raise AttributeError_("the temperature must be a finite non-negative number")
