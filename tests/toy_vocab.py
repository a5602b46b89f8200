"""The small hand-made vocabularies the engine, verify and native tests share.

Their ids are part of the tests' assertions (29 is the stop token, 30 a special one), so each
list is built from the shared JSON/bracket pieces by appending, never by reordering.
"""

from __future__ import annotations

# JSON punctuation, words and brackets: ids 0-20 of every toy vocabulary.
JSON_PIECES = [
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b":",
    b",",
    b" ",
    b"a",
    b"b",
    b"ab",
    b'"a"',
    b"1",
    b"0",
    b"true",
    b"null",
    b'{"',
    b'":',
    b"\n",
    b"(",
    b")",
]
# + arithmetic and a two-byte character; 28 repeats id 8, 29 stop, 30 special (empty bytes).
ARITH_TOKENS = JSON_PIECES + [b"+", b"*", b"12", b"10", b"0)", b"1+", b"\xc3\xa9", b"a", b"", b""]
# + doubled brackets (nesting in one token).
NESTING_TOKENS = ARITH_TOKENS + [b"[[", b"]]", b"((", b"))"]
STOP_ID, SPECIAL_ID = 29, 30
