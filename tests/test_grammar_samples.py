"""The bundled grammars (grammars/*.ebnf) against their sample documents, with real XGrammar.

Byte-level acceptance: ``xgrammar.GrammarMatcher.accept_string`` takes ``bytes`` (a UTF-8
character may even be split across calls) and returns False, leaving the matcher's state as
it was, when the bytes cannot continue the input. A document is accepted in full when all of
its bytes are accepted and the stop token is then accepted too (``is_terminated()``). The
tokenizer is a raw vocabulary of the 256 single bytes plus one stop token, which is also
what the compile check uses.
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import pytest
from paths import BUILTIN_JSON, BUNDLED_DIR

xgr = pytest.importorskip("xgrammar")

GRAMMAR_DIR = BUNDLED_DIR
SAMPLE_DIR = GRAMMAR_DIR / "samples"

GRAMMARS = [
    "json",
    "c_like",
    "bython",
    "xml",
    "sql_select",
    "arithmetic_left_recursive",
    "unicode",
]

STOP_ID = 256


def _samples(name: str) -> list[Path]:
    return sorted((SAMPLE_DIR / name).glob("*.txt"))


ALL_SAMPLES = [(name, path) for name in GRAMMARS for path in _samples(name)]


@cache
def _compiler():
    vocab = [bytes([b]) for b in range(256)] + [b"</s>"]
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=[STOP_ID])
    # Cache on (the default): it compiles a Grammar object through its printed form, so
    # this also catches text that does not survive xgrammar's printer (see test below).
    return xgr.GrammarCompiler(info)


@cache
def _grammar_text(name: str) -> str:
    return (GRAMMAR_DIR / f"{name}.ebnf").read_text(encoding="utf-8")


@cache
def _compiled(name: str):
    return _compiler().compile_grammar(xgr.Grammar.from_ebnf(_grammar_text(name)))


@cache
def _compiled_builtin_json():
    return _compiler().compile_builtin_json_grammar()


def accepts(compiled, data: bytes) -> bool:
    """Whether ``data`` is a complete sentence: all bytes accepted, then the stop token."""
    matcher = xgr.GrammarMatcher(compiled)
    if not matcher.accept_string(data):
        return False
    return matcher.accept_token(STOP_ID) and matcher.is_terminated()


def first_rejected_byte(compiled, data: bytes) -> int | None:
    """Offset of the first byte the matcher refuses (len(data) if only the end is missing)."""
    matcher = xgr.GrammarMatcher(compiled)
    for i in range(len(data)):
        if not matcher.accept_string(data[i : i + 1]):
            return i
    return None if matcher.is_completed() else len(data)


def prefix_trace(compiled, data: bytes) -> tuple[int, bool]:
    """How many bytes are accepted one at a time, and whether the whole input completes."""
    matcher = xgr.GrammarMatcher(compiled)
    for i in range(len(data)):
        if not matcher.accept_string(data[i : i + 1]):
            return i, False
    return len(data), matcher.is_completed()


# --------------------------------------------------------------------------- the files


def test_every_grammar_has_a_file_and_samples():
    assert sorted(p.stem for p in GRAMMAR_DIR.glob("*.ebnf")) == sorted(GRAMMARS)
    for name in GRAMMARS:
        samples = _samples(name)
        assert 3 <= len(samples) <= 6, (name, len(samples))
        for path in samples:
            size = len(path.read_bytes())
            assert 100 <= size <= 2000, (path.name, size)


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_starts_with_comment_block(name):
    lines = _grammar_text(name).splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    assert len(header) >= 5, f"{name}.ebnf must start with a '#' block describing the language"


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_parses_compiles_and_uses_plain_ebnf(name):
    grammar = xgr.Grammar.from_ebnf(_grammar_text(name))
    printed = str(grammar)
    assert "(=" not in printed, "no lookahead assertions"
    assert "TagDispatch" not in printed and "Regex" not in printed
    assert _compiled(name) is not None


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_survives_xgrammar_printer(name):
    # xgrammar 0.2.8 prints U+0080..U+00FF as \xHH and reads "\xHH" greedily, so a literal
    # like "°C" prints as "\xb0C" and reads back as U+0B0C. GrammarCompiler (cache on)
    # compiles Grammar objects through that text, so such a grammar silently changes.
    printed = str(xgr.Grammar.from_ebnf(_grammar_text(name)))
    assert str(xgr.Grammar.from_ebnf(printed)) == printed


def rule_count(name: str) -> int:
    """Rules as written in the file (xgrammar adds helper rules for `*`, `?`, groups)."""
    return sum(1 for line in _grammar_text(name).splitlines() if " ::= " in line and not line.startswith("#"))


def test_c_like_is_the_largest_grammar():
    counts = {name: rule_count(name) for name in GRAMMARS}
    assert counts["c_like"] >= 100
    assert counts["c_like"] == max(counts.values()), counts


# ------------------------------------------------------------------------ acceptance


@pytest.mark.parametrize(("name", "path"), ALL_SAMPLES, ids=[f"{n}/{p.name}" for n, p in ALL_SAMPLES])
def test_sample_accepted_in_full(name, path):
    data = path.read_bytes()
    compiled = _compiled(name)
    if not accepts(compiled, data):
        at = first_rejected_byte(compiled, data)
        context = data[max(0, (at or 0) - 60) : (at or 0) + 20].decode("utf-8", "replace")
        pytest.fail(f"{path.name} rejected at byte {at}: {context!r}")


@pytest.mark.parametrize(("name", "path"), ALL_SAMPLES, ids=[f"{n}/{p.name}" for n, p in ALL_SAMPLES])
def test_sample_with_invalid_utf8_rejected(name, path):
    data = path.read_bytes()
    middle = len(data) // 2
    while middle < len(data) and (data[middle] & 0xC0) == 0x80:
        middle += 1  # do not cut a character
    assert not accepts(_compiled(name), data[:middle] + b"\xff" + data[middle:])


# (sample, text in it, replacement): each replacement makes the document invalid.
MUTATIONS = {
    "json": [
        ("package_manifest.txt", '"private": true', '"private": True'),
        ("compact_records.txt", '"tags":[]', '"tags":[,]'),
        ("escapes_and_numbers.txt", "\\u00e9", "\\u00g9"),
        ("escapes_and_numbers.txt", "0.001", "00.001"),
        ("whitespace_geo.txt", '"Australia/Sydney" }', '"Australia/Sydney", }'),
        ("openapi_fragment.txt", '"int64"}', '"int64"'),
    ],
    "c_like": [
        ("linked_list.txt", "return count;", "return count"),
        ("tokenizer_switch.txt", "case '\\0':", "case '':"),
        ("matrix_macros.txt", "#define N 4", "#define 4 N"),
        ("callbacks.txt", "size_t i, j;", "size_t i j;"),
        ("bits_and_literals.txt", "0x1u,", "0x1g,"),
        ("bits_and_literals.txt", '[0] = "zero\\tone\\n",', '[0] = "zero\\tone\\n,'),
    ],
    "bython": [
        ("fibonacci_cache.txt", "return n;", "return n"),
        ("inventory_class.txt", "class Item {", "class Item:"),
        ("numeric_tricks.txt", "0xFF_FF", "0xFF__FF"),
        ("text_stats.txt", "def words(text) {", "def words(text): {"),
        ("async_fetch.txt", "} finally {", "} else if x {"),
    ],
    "xml": [
        ("rss_feed.txt", "</channel>", "</channel"),
        ("svg_icon.txt", 'r="12"/>', "r=12/>"),
        ("library_dtd.txt", "&publisher;", "&publisher"),
        ("unicode_config.txt", "<!-- trailing comment -->", "<!-- trailing -- comment -->"),
        ("unicode_config.txt", "</Einstellungen>", "</Einstellungen><zweite/>"),
        ("rss_feed.txt", "<rss version", "<?xml version='1.0'?><rss version"),
    ],
    "sql_select": [
        ("sales_report.txt", "LIMIT 20 OFFSET 0;", "LIMIT 20 OFFSET;"),
        ("cte_window.txt", "order by r.department", "order r.department"),
        ("subqueries_case.txt", "'don''t sell'", "'don't sell'"),
        ("simple_lookup.txt", "IN (1, 2, 3)", "IN (1, 2, 3"),
        ("set_ops_params.txt", "BETWEEN -5.5e2 AND", "BETWEEN -5.5e2 OR"),
    ],
    "arithmetic_left_recursive": [
        ("physics.txt", "vx = v0 * cos(angle);", "vx = v0 * * cos(angle);"),
        ("functions.txt", "== 512;", "== 512 == 8;"),
        ("polynomial.txt", "(x + 1)", "(x + 1"),
        ("one_liner.txt", "g(h(1), 2)", "g(h(1), )"),
    ],
    "unicode": [
        ("greek_animals.txt", "γάτα /ˈɣa.ta/: cat", "γάτα /ˈɣa.ta/ cat"),
        ("japanese_kitchen.txt", "【台所】 🇯🇵", "【台所】 🇯"),
        ("mixed_scripts.txt", "| 𐀀\n", "| \U00010011\n"),
        ("russian_city.txt", '"13 млн"', '"13 млн'),
        ("edge_cases_crlf.txt", "key：value", "key value"),
    ],
}

MUTATION_CASES = [(name, sample, old, new) for name, cases in MUTATIONS.items() for sample, old, new in cases]


@pytest.mark.parametrize(
    ("name", "sample", "old", "new"),
    MUTATION_CASES,
    ids=[f"{n}/{s}:{o[:16]}" for n, s, o, _ in MUTATION_CASES],
)
def test_mutated_sample_rejected(name, sample, old, new):
    text = (SAMPLE_DIR / name / sample).read_bytes().decode("utf-8")  # keep \r\n
    assert text.count(old) == 1, f"mutation anchor {old!r} must occur once in {sample}"
    mutated = text.replace(old, new).encode("utf-8")
    assert accepts(_compiled(name), text.encode("utf-8"))
    assert not accepts(_compiled(name), mutated)


def test_every_grammar_has_mutations():
    assert set(MUTATIONS) == set(GRAMMARS)
    assert all(len(cases) >= 3 for cases in MUTATIONS.values())


# ------------------------------------------------------- json.ebnf == builtin JSON


def _random_json_like(rng: random.Random) -> str:
    ws = [" ", "\n", "\r", "\t", ""]

    def space():
        return "".join(rng.choice(ws) for _ in range(rng.randint(0, 2)))

    def string():
        parts = ["a", "é", "\\n", "\\u00AF", '\\"', "\\\\", "\\/", "\x7f", "😀", " ", "\\x", "\x01", "\\U"]
        return '"' + "".join(rng.choice(parts) for _ in range(rng.randint(0, 4))) + '"'

    def number():
        return rng.choice(["0", "-0", "12", "-7", "01", "1.5", "1.", ".5", "1e5", "1E+05", "1e", "-", "+1", "0.0e-1"])

    def value(depth):
        r = rng.random()
        if depth > 3 or r < 0.4:
            return rng.choice([string, number, lambda: rng.choice(["true", "false", "null", "nul", "True"])])()
        return obj(depth + 1) if r < 0.7 else arr(depth + 1)

    def obj(depth):
        members = [string() + space() + ":" + space() + value(depth) + space() for _ in range(rng.randint(0, 3))]
        return "{" + space() + ("," + space()).join(members) + "}"

    def arr(depth):
        items = [value(depth) + space() for _ in range(rng.randint(0, 3))]
        return "[" + space() + ("," + space()).join(items) + "]"

    text = (space() if rng.random() < 0.05 else "") + (obj(0) if rng.random() < 0.5 else arr(0))
    if rng.random() < 0.3:
        k = rng.randrange(len(text))
        text = text[:k] + rng.choice(["", ",", "]", "}", '"', " ", "1", "{"]) + text[k + 1 :]
    return text


def test_json_grammar_matches_builtin_json_language():
    ours, builtin = _compiled("json"), _compiled_builtin_json()
    rng = random.Random(20240601)
    inputs = [p.read_bytes() for p in _samples("json")]
    inputs += [
        (SAMPLE_DIR / "json" / s).read_bytes().decode("utf-8").replace(o, n).encode("utf-8")
        for s, o, n in MUTATIONS["json"]
    ]
    inputs += [_random_json_like(rng).encode("utf-8") for _ in range(600)]
    inputs += [b" {}", b"{} ", b'"x"', b"1", b"[]", b"{ }", b"[-0]", b"[1.]", b"[1E+5]"]
    n_complete = 0
    for data in inputs:
        expected = prefix_trace(builtin, data)
        assert prefix_trace(ours, data) == expected, data
        n_complete += expected[1]
    assert n_complete > 100


def test_builtin_json_file_is_xgrammars_builtin():
    if not BUILTIN_JSON.exists():
        pytest.skip("shared/grammars not present")
    text = BUILTIN_JSON.read_text(encoding="utf-8").strip()
    assert text == str(xgr.Grammar.builtin_json_grammar()).strip()
