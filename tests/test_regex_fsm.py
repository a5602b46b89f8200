"""XGrammar's regex automaton, mirrored: ours against the one the installed binary builds.

Three kinds of evidence, all against the installed xgrammar 0.2.8:

- *the same automaton*: the binary prints each rule's final automaton
  (``_print_grammar_fsms``); :func:`xgrammar_fsm.same_language` decides exactly (no length
  bound) that ours accepts the same byte strings, on a table of quirks, on every ``Regex``
  of the shared corpora (XGrammar's own test grammars and the JSON-Schema-Test-Suite's
  patterns) and on random patterns;
- *the same verdicts*: the full pipeline (our AST → byte CFG → GNF) and XGrammar's compiled
  matcher agree on every string up to length 4 over the patterns' alphabet;
- *the same masks*: the smallest grammar behind each of issue 17's three real-world
  mismatches (jsb_0038, jsb_0130, jsb_0172), classed and stepped against plain XGrammar,
  compressed and native.
"""

from __future__ import annotations

import glob
import gzip
import itertools
import json
import os
import random
import re
import sys

import pytest
from grammar_tools import xgrammar_matcher, xgrammar_matches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import CORPORA
from xgrammar_fsm import NFA, nfa_of, same_language, xgrammar_rule_fsms

from cfgzip_lab import xgrammar_version
from cfgzip_lab.engine import compile_engines
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import check_ebnf, parse_ebnf
from cfgzip_lab.grammar.gnf import to_gnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.grammar.regex import RegexError, regex_to_expr
from cfgzip_lab.grammar.regex_fsm import LARGE_REPEAT_THRESHOLD
from cfgzip_lab.grammar.tree import Automaton, GrammarAST, Repeat, Rule
from cfgzip_lab.native import build_native_engine
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.verify import verify_engines
from cfgzip_lab.vocab import vocab_from_bytes


def regex_grammar(pattern: str, json_string: bool = False, flags: str | None = None) -> str:
    extra = (", json_string=true" if json_string else "") + (
        f", flags={json.dumps(flags)}" if flags is not None else ""
    )
    return f"root ::= Regex({json.dumps(pattern, ensure_ascii=False)}{extra})"


def as_bytes(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass")


def _unnamed(nfa: NFA) -> NFA:
    """Sub-rule edges labelled by kind and bounds only (sub-rules are compared on their own)."""
    rows = [
        [
            ((label[0], *label[2:]) if isinstance(label, tuple) and label[:1] in (("rep",), ("ref",)) else label, t)
            for label, t in row
        ]
        for row in nfa.edges
    ]
    return NFA(nfa.start, nfa.finals, rows)


def assert_same_automaton(pattern: str, json_string: bool = False, flags: str | None = None) -> None:
    """Our automaton and every sub-rule's accept what the binary's rule automata accept."""
    ours = regex_to_expr(pattern, json_string=json_string, flags=flags)
    theirs = xgrammar_rule_fsms(regex_grammar(pattern, json_string, flags))
    names: dict[int, str] = {}
    same, witness = same_language(_unnamed(nfa_of(ours, names)), _unnamed(theirs.pop("root")))
    assert same, f"{pattern!r}: the languages differ on {witness!r}"
    # Sub-rules (large repetitions): each of ours has a twin among XGrammar's (which keeps
    # orphans of nested ones too).
    subs = _sub_automata(ours)
    for sub in subs:
        assert any(same_language(_unnamed(nfa_of(sub)), _unnamed(nfa))[0] for nfa in theirs.values()), pattern
    assert len(theirs) >= len(subs)


def _sub_automata(automaton: Automaton) -> list[Automaton]:
    out: list[Automaton] = []
    for _, label, _ in automaton.edges:
        inner = label.item if isinstance(label, Repeat) else label
        if isinstance(inner, Automaton) and all(inner is not o for o in out):
            out += [inner, *_sub_automata(inner)]
    return out


def both_verdicts(text: str, strings) -> list[tuple[bytes, bool, bool]]:
    matcher = xgrammar_matcher(text)
    gnf = compile_grammar(text).gnf
    return [(as_bytes(s), xgrammar_matches(matcher, as_bytes(s)), gnf.accepts(as_bytes(s))) for s in strings]


# ---- XGrammar's quirks, pinned --------------------------------------------------------------

# pattern, json_string, accepted, rejected: each verdict checked on XGrammar and on our GNF.
# The "quirk" strings are outside the language the pattern denotes; XGrammar 0.2.8 accepts them.
_FORBIDDEN_SAMPLE = ['"', "\\", "\n"]
_JSON_BYTES_FROM_029 = _FORBIDDEN_SAMPLE if xgrammar_version.at_least("0.2.9") else []
_JSON_BYTES_BEFORE_029 = [] if xgrammar_version.at_least("0.2.9") else _FORBIDDEN_SAMPLE

quirk__pattern__json_string__accepted__rejected = [
    # X? adds ε from X's start to its lowest end state, which may have edges of its own:
    ("plus end", "(ab+)?", False, ["", "ab", "abb", "b", "bb"], ["a", "ba"]),
    ("jsb_0038", "(\\.\\d+)?", True, ["", ".5", "5", "55"], [".", "5."]),
    ("star end", "(ab*)?", False, ["", "a", "ab", "b", "bb"], ["ba", "aa"]),
    ("jsb_0130", "/(a+(/a*)*)?", True, ["/", "/a", "/a/", "//", "//a"], ["", "a", "/b"]),
    ("first copy", "(ab{1,2})?", False, ["", "ab", "abb", "b"], ["bb", "abbb"]),
    ("jsb_0172", "(-(x(-[a1]{1,8})+))?", True, ["", "-x-a1", "1", "a1", "-1", "a"], ["x", "-x", "-"]),
    ("repeat ends", "(a{2,3})?", False, ["", "a", "aa", "aaa"], ["aaaa"]),
    ("standard ?", "(ab)?", False, ["", "ab"], ["a", "b"]),
    ("standard ?+", "b(a+)?b", False, ["bb", "bab", "baab"], ["b", "bba"]),
    # MergeEquivalentStates merges a state with a sibling and, in the same round, the sibling
    # with every other final state without successors: (a{0,2}|a) is a*.
    ("merge", "(a{0,2}|a)", False, ["", "a", "aa", "aaa", "aaaa"], ["b"]),
    ("merge", "([a-c]{0,2}|[a-c]){2}", False, ["aaaa", "aaaaa", "abcabc"], ["d"]),
    # Classes spanning several UTF-8 lengths take overlong three- and four-byte forms.
    ("overlong", ".", False, ["a", "é", b"\xe0\x80\x80", b"\xf0\x80\x80\x80"], [b"\xc0\x80", b"\xe0\x80", b"\xf8"]),
    ("overlong", "[^a]", False, [b"\xe0\x80\x80", "é"], ["a", b"\xc1\xbf"]),
    ("no overlong", "[\\u0800-\\uffff]", False, ["\u0800", "\uffff"], [b"\xe0\x80\x80", b"\xf0\x80\x80\x80"]),
    # json_string reaches into a large repetition (a sub-rule) from 0.2.9 only; 0.2.8 compiles
    # the sub-rule without the flag (tests/test_xgrammar_versions.py pins both).
    ("json large", ".{0,200}", True, ["", "ab", *_JSON_BYTES_BEFORE_029], _JSON_BYTES_FROM_029),
    ("json small", ".{0,128}", True, ["", "ab"], ['"', "\\", "\n"]),
    # {n,} loops from the ends of copy n back to the lowest end of copy n-1.
    ("loop", "(ab|a){2,}", False, ["aa", "aba", "abab", "aaa"], ["a", "b"]),
]


@pytest.mark.parametrize(
    "quirk, pattern, json_string, accepted, rejected",
    quirk__pattern__json_string__accepted__rejected,
    ids=[f"{row[0]}:{row[1]}" for row in quirk__pattern__json_string__accepted__rejected],
)
def test_quirk__pattern__json_string__accepted__rejected(quirk, pattern, json_string, accepted, rejected):
    text = regex_grammar(pattern, json_string)
    for data, xgrammar_says, we_say in both_verdicts(text, accepted + rejected):
        expected = data in {as_bytes(s) for s in accepted}
        assert xgrammar_says == expected, f"XGrammar on {data!r}: the table is wrong"
        assert we_say == expected, f"cfgzip on {data!r}"
    assert_same_automaton(pattern, json_string)


@pytest.mark.parametrize(
    "text, accepted, rejected",
    [
        ('root ::= "<" Regex("(ab+)?") ">"', ["<>", "<b>", "<ab>", "<bb>"], ["<a>"]),
        ('root ::= x x\nx ::= Regex("(a{0,2}|a)") "-"', ["--", "a-aaa-", "aaaa-a-"], ["-"]),
        ('root ::= Regex("(a?){2,150}") "b" Regex("(ab*)?")', ["b", "bb", "aab", "bab", "ba"], ["a"]),
    ],
)
def test_a_regex_among_other_elements_keeps_its_quirks(text, accepted, rejected):
    """XGrammar lifts every Regex into a rule of its own: its automaton does not depend on what
    stands around it (nullable ones included)."""
    for data, xgrammar_says, we_say in both_verdicts(text, accepted + rejected):
        expected = data in {as_bytes(s) for s in accepted}
        assert xgrammar_says == expected, f"XGrammar on {data!r}: the table is wrong"
        assert we_say == expected, f"cfgzip on {data!r}"


# ---- large repetitions: a sub-rule and a counter, never unrolled -------------------------------


def test_large_bounds_stay_one_repetition():
    automaton = regex_to_expr("(ab){2,50000}c")
    repeats = [label for _, label, _ in automaton.edges if isinstance(label, Repeat)]
    assert [(r.min, r.max) for r in repeats] == [(2, 50000)]
    assert automaton.num_states == 3 and repeats[0].item.num_states == 3
    # {n,}: n copies by the counter, then the same sub-automaton starred.
    open_ended = regex_to_expr("(ab){200,}c")
    labels = [label for _, label, _ in open_ended.edges if not isinstance(label, tuple)]
    (repeat,) = [label for label in labels if isinstance(label, Repeat)]
    assert (repeat.min, repeat.max) == (200, 200)
    assert all(label is repeat.item for label in labels if isinstance(label, Automaton))
    assert any(isinstance(label, Automaton) for label in labels)


@pytest.mark.parametrize(
    "pattern, large",
    [
        ("a{128}", False),
        ("a{129}", True),
        ("a{0,128}", False),
        ("a{0,129}", True),
        ("a{128,}", False),
        ("a{129,}", True),
    ],
)
def test_large_repeat_threshold(pattern, large):
    automaton = regex_to_expr(pattern)
    assert any(isinstance(label, Repeat) for _, label, _ in automaton.edges) == large
    theirs = xgrammar_rule_fsms(regex_grammar(pattern))
    assert (len(theirs) > 1) == large, "XGrammar makes a sub-rule exactly above 128"
    assert LARGE_REPEAT_THRESHOLD == 128


@pytest.mark.parametrize(
    "pattern, accepted, rejected",
    [
        ("(ab){2,130}c", ["ababc", "ab" * 130 + "c"], ["abc", "ab" * 131 + "c", "ababac"]),
        ("a{130,}", ["a" * 130, "a" * 131], ["a" * 129, ""]),
        ("(a?){2,130}b", ["b", "ab", "a" * 130 + "b"], ["a" * 131 + "b"]),
        ("((ab+)?){129,}", ["", "b", "abab", "bbab"], ["a", "ba"]),  # the sub-rule keeps its ?-quirk
    ],
)
def test_large_repeat_counts_as_xgrammars_matcher(pattern, accepted, rejected):
    """The counted repeat edge (XGrammar's Earley counter) against our Repeat of the sub-automaton."""
    for data, xgrammar_says, we_say in both_verdicts(regex_grammar(pattern), accepted + rejected):
        expected = data in {as_bytes(s) for s in accepted}
        assert xgrammar_says == expected, f"XGrammar on {data!r}: the table is wrong"
        assert we_say == expected, f"cfgzip on {data!r}"


def test_a_nullable_large_repeat_counts_from_zero():
    # (a?){2,300}: XGrammar relaxes the lower bound of a nullable sub-pattern (same language).
    (repeat,) = [label for _, label, _ in regex_to_expr("(a?){2,300}b").edges if isinstance(label, Repeat)]
    assert (repeat.min, repeat.max) == (0, 300)


def test_a_shared_sub_automaton_is_lowered_once():
    automaton = regex_to_expr("(ab){200,}")
    cfg = lower(GrammarAST({"root": Rule("root", automaton)}))
    sub_states = [name for name, origin in cfg.origins.items() if origin.kind == "regex"]
    assert len(sub_states) == automaton.num_states + 3, "the sub-rule's three states once, not twice"


# ---- errors: XGrammar's own (the binary agrees) -------------------------------------------------


@pytest.mark.parametrize("pattern", ["((a{100}){100}){100}", "(a{100}){100}{20}"])
def test_an_unrolled_repetition_past_xgrammars_cap_is_its_error(pattern):
    with pytest.raises(RegexError, match="too large to compile into a FSM") as info:
        regex_to_expr(pattern)
    assert not info.value.refused
    with pytest.raises(Exception):  # noqa: B017 - XGrammar raises RuntimeError
        xgrammar_matcher(regex_grammar(pattern))


def test_json_string_dead_ends_are_decided_on_the_automaton():
    # After "a", a("|b) can still read "b" (XGrammar's matcher agrees): no dead end, served.
    text = regex_grammar('a("|b)', json_string=True)
    for data, xgrammar_says, we_say in both_verdicts(text, ["ab", "a", 'a"', "b"]):
        assert xgrammar_says == we_say == (data == b"ab"), data


# ---- flags (issue 19): i, s, u; '.' stops at newlines once the argument is there ----------------

flags__pattern__accepted__rejected = [
    (None, "a.b", ["a\nb", "axb"], ["AXB"]),
    ("", "a.b", ["axb"], ["a\nb"]),
    ("s", "a.b", ["a\nb", "axb"], []),
    ("u", "a.b", ["axb"], ["a\nb"]),
    ("i", "a.b", ["AXB", "axb"], ["A\nB"]),
    ("is", "a.b", ["A\nB"], []),
    ("ii", "a.b", ["AxB"], []),
    ("i", "(?i)a.b", ["AxB"], ["A\nB"]),
    ("", "a[.]b\\.", ["a.b."], ["axb."]),
    ("", "[^.]", ["\n", "x"], ["."]),
    ("", ".{0,200}", ["xx"], ["\n"]),  # the sub-rule's text has the rewritten dot
    ("i", "[a-c]{0,200}", ["ABC"], ["d"]),  # and the case folding
]


@pytest.mark.parametrize(
    "flags, pattern, accepted, rejected",
    flags__pattern__accepted__rejected,
    ids=[f"{row[0]!r}:{row[1]}" for row in flags__pattern__accepted__rejected],
)
def test_flags__pattern__accepted__rejected(flags, pattern, accepted, rejected):
    matcher = xgrammar_matcher(regex_grammar(pattern, flags=flags))
    gnf = gnf_of(regex_to_expr(pattern, flags=flags))
    for s in accepted + rejected:
        data, expected = as_bytes(s), s in accepted
        assert xgrammar_matches(matcher, data) == expected, f"XGrammar on {data!r}: the table is wrong"
        assert gnf.accepts(data) == expected, f"cfgzip on {data!r}"
    assert_same_automaton(pattern, flags=flags)


@pytest.mark.parametrize("flags, letter", [("x", "x"), ("m", "m"), ("S", "S"), ("I", "I"), ("iq", "q")])
def test_unsupported_flags_are_xgrammars_error(flags, letter):
    with pytest.raises(RegexError, match=f"regular-expression flag '{letter}' is not supported") as info:
        regex_to_expr("a", flags=flags)
    assert info.value.in_flags and not info.value.refused
    with pytest.raises(Exception):  # noqa: B017 - XGrammar raises RuntimeError
        xgrammar_matcher(regex_grammar("a", flags=flags))


def gnf_of(expr):
    """The GNF of a one-rule grammar whose body is ``expr`` (no front end in between)."""
    return to_gnf(lower(GrammarAST({"root": Rule("root", expr)})))


# ---- inputs nobody here wrote: every Regex of the shared corpora --------------------------------

_CALL = re.compile(r'Regex\(("(?:[^"\\]|\\.)*")((?:\s*,\s*\w+\s*=\s*(?:true|false|"[^"]*"))*)\s*\)')


def corpus_regexes() -> list[tuple[str, str, bool, str | None]]:
    """(source, pattern, json_string, flags) for each Regex call in XGrammar's test grammars and
    each pattern / patternProperties key / propertyNames pattern of the JSON-Schema-Test-Suite."""
    out: dict[tuple, str] = {}
    for path in sorted(glob.glob(os.path.join(CORPORA, "xgrammar-tests", "*.ebnf"))):
        for m in _CALL.finditer(open(path, encoding="utf-8").read()):
            try:
                body = parse_ebnf(f"root ::= Regex({m.group(1)})").rules["root"].body
            except GrammarError:
                continue  # the pattern is one XGrammar rejects; the error tables cover those
            flags = re.search(r'flags\s*=\s*"([^"]*)"', m.group(2))
            key = (body.pattern, "json_string=true" in m.group(2), flags.group(1) if flags else None)
            out.setdefault(key, os.path.basename(path))
    for path in sorted(glob.glob(os.path.join(CORPORA, "json-schema-test-suite", "[0-9]*[0-9].json"))):
        for pattern in _schema_patterns(json.load(open(path, encoding="utf-8"))):
            out.setdefault((pattern, True, None), os.path.basename(path))
    for name, pattern in maskbench_space_patterns():
        out.setdefault((pattern, True, None), f"maskbench/{name}")
    return [(source, *key) for key, source in out.items()]


def maskbench_space_patterns() -> list[tuple[str, str]]:
    """(schema file, pattern) for every MaskBench pattern with ``\\s`` or ``\\S``: the classes
    XGrammar 0.2.9 widened to Unicode spaces, in the idioms real schemas use them in
    (``(?:\\S+\\s+){0,n}\\S+``, ``[^@\\s]+@…``); ~80 patterns, read in about a second."""
    path = os.path.join(CORPORA, "maskbench", "maskbench.jsonl.gz")
    found: dict[str, str] = {}
    if not os.path.exists(path):  # as the globs above: test_the_corpora_have_regexes says it is missing
        return []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            for pattern in _schema_patterns(record["schema"]):
                if re.search(r"\\[sS]", pattern):
                    found.setdefault(pattern, record["name"])
    return [(name, pattern) for pattern, name in found.items()]


def _schema_patterns(node) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            found += list(node["patternProperties"])
        for value in node.values():
            found += _schema_patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += _schema_patterns(value)
    return found


CORPUS = corpus_regexes()


def test_the_corpora_have_regexes():
    assert len(CORPUS) >= 60, len(CORPUS)
    assert sum(source.startswith("maskbench/") for source, *_ in CORPUS) >= 60


@pytest.mark.parametrize("source, pattern, json_string, flags", CORPUS, ids=[f"{c[0]}:{c[1][:40]}" for c in CORPUS])
def test_corpus_regex_is_xgrammars_automaton(source, pattern, json_string, flags):
    try:
        regex_to_expr(pattern, json_string=json_string, flags=flags)
    except RegexError as error:
        if not error.refused and not re.search(r"\{\s*\d{3,}", pattern):  # XGrammar crashes on some
            with pytest.raises(Exception):  # noqa: B017 - XGrammar must reject it too
                xgrammar_matcher(regex_grammar(pattern, json_string, flags))
        return
    assert_same_automaton(pattern, json_string, flags)


# ---- random patterns: exact automata, and the full pipeline on every short string ---------------

ALPHABET = ["a", "b", "/"]
SHORT_STRINGS = ["".join(p) for n in range(5) for p in itertools.product(ALPHABET, repeat=n)]
ATOMS = ["a", "b", "/", "[ab]", "[^a]", ".", "\\/", "(?=a)", "^", "$", "()"]
QUANTIFIERS = ["*", "+", "?", "*?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0,}", "{1,}", "{0}", "{0,1}", "{3,4}"]


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    """A random pattern over ``a b /``: atoms, sequences, groups with alternatives, quantifiers."""
    kind = rng.randint(0, 9 if depth < 3 else 2)
    if kind <= 3:
        text = rng.choice(ATOMS)
    elif kind <= 6:
        text = "".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(1, 3)))
    else:
        text = "(" + "|".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(1, 3))) + ")"
    if rng.random() < 0.4:
        text += rng.choice(QUANTIFIERS)
    return text


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_random_patterns_are_xgrammars_automata(rng):
    """Exact automata, and every string of length <= 4 over the alphabet through the whole
    pipeline (AST → CFG → GNF) against XGrammar's compiled matcher. A seeded 60 here; by hand
    ``python tests/test_regex_fsm.py N`` runs N more (see :func:`main`)."""
    check_random_pattern(random_pattern(rng), rng.random() < 0.3)


def check_random_pattern(pattern: str, json_string: bool) -> None:
    try:
        regex_to_expr(pattern, json_string=json_string)
    except RegexError as error:
        if not error.refused:
            with pytest.raises(Exception):  # noqa: B017
                xgrammar_matcher(regex_grammar(pattern, json_string))
        return
    assert_same_automaton(pattern, json_string)
    text = regex_grammar(pattern, json_string)
    try:
        verdicts = both_verdicts(text, SHORT_STRINGS)
    except GrammarError as error:  # the language is empty: XGrammar accepts nothing either
        assert "empty" in str(error)
        matcher = xgrammar_matcher(text)
        assert not any(xgrammar_matches(matcher, as_bytes(s)) for s in SHORT_STRINGS)
        return
    for data, xgrammar_says, we_say in verdicts:
        assert xgrammar_says == we_say, (pattern, data)


# ---- the three real-world mismatches of issue 17, as the smallest grammars: masks -----------------

TOKENS = [*"ab/.5-x1", "ab", "bb", "//", "/a", "a/", ".5", "55", "5.", "-x", "-1", "x-", "a1", "1a", "b/"]
VOCAB = vocab_from_bytes([t.encode() for t in TOKENS] + [b""], stop_ids=[len(TOKENS)], name="regex-fsm-toy")

# Each: the construct of the schema's pattern that XGrammar reads differently, as small as it gets.
SMALLEST = {
    "jsb_0038": regex_grammar("(\\.5+)?"),  # '?' over a group ending in '+': "5" without the dot
    "jsb_0130": regex_grammar("/(a+(/a*)*)?"),  # '?' over a group ending in '*': "//"
    "jsb_0172": regex_grammar("a(-(x(-[a1]{1,8})+))?"),  # '?' reaching the first copy of {1,8}: "a1"
}


@pytest.mark.parametrize("case", sorted(SMALLEST))
def test_smallest_grammar_of_each_mismatch_masks_like_xgrammar(case):
    text = SMALLEST[case]
    compiled = compile_grammar(text)
    result = build_classes(compiled, VOCAB)
    engines = compile_engines(text, VOCAB, result.classes)
    native = build_native_engine(compiled, VOCAB, result.classes, classing=result, xgrammar_engines=engines)
    quirky = {"jsb_0038": "5", "jsb_0130": "//", "jsb_0172": "a1"}[case]
    for name, candidate in (("compressed", None), ("native", native.matcher)):
        kwargs = {"candidate": candidate, "candidate_name": name} if candidate else {}
        report = verify_engines(engines, walks=12, steps=8, seed=3, docs=[quirky], **kwargs)
        assert report.ok, (name, report.first_mismatch)
        assert report.steps_checked > 12 and not report.docs_rejected, "the quirky string is XGrammar's"
    assert compiled.gnf.accepts(quirky.encode())


def test_regex_warnings_reach_the_editor():
    (diagnostic,) = check_ebnf('root ::= "x" Regex("a(?=b)b")')
    assert diagnostic.severity == "warning" and "lookahead" in diagnostic.message
    assert diagnostic.column == len('root ::= "x" Regex("a') + 1


def main(argv: list[str]) -> None:
    """``python tests/test_regex_fsm.py N [SEED]``: N random patterns through the check above."""
    count, seed = int(argv[0]), int(argv[1]) if len(argv) > 1 else 0
    rng = random.Random(seed)
    for _ in range(count):
        pattern, json_string = random_pattern(rng), rng.random() < 0.3
        try:
            check_random_pattern(pattern, json_string)
        except BaseException:
            print(f"FAILED on {pattern!r} json_string={json_string}")
            raise
    print(f"{count} random patterns (seed {seed}): all agree with XGrammar")


if __name__ == "__main__":
    main(sys.argv[1:])
