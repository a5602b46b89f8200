"""Class explanations in the author's terms: one sentence over source rules, and why two tokens differ."""

from __future__ import annotations

import random
import re

import pytest

from cfgzip_lab.classes.displacement import Displacer
from cfgzip_lab.classes.explain import compare_tokens, explain, explain_class, explain_token, token_text
from cfgzip_lab.grammar.words import EMPTY
from cfgzip_lab.pipeline import build_classes, compile_grammar

EXPR = """root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
"""

# GNF internals an author never wrote: helper names (expr@3), the fresh start, Z tails.
INTERNAL = re.compile(r"@\d|\bS0\b|(?<!')\b[A-Za-z_][\w.-]*'(?!\w)")


@pytest.fixture(scope="module")
def expr():
    return Displacer(compile_grammar(EXPR).gnf)


def test_plus_and_minus_are_interchangeable_in_source_terms(expr):
    e = explain(expr, b"+", label="'+'", peers=["'-'"])
    assert e.sentence.startswith("'+' and '-' are interchangeable: both can come where the repetition")
    assert "in rule expr (line 2)" in e.sentence and "need rule term (line 3) after" in e.sentence
    assert set(e.rules) == {"expr", "term"}
    assert e.num_pairs == 2 and {p.gnf_text() for p in e.pairs} >= {"[expr@3] → [term expr@3]"}
    assert not INTERNAL.search(e.sentence)


def test_closing_token_completes_and_a_dead_one_says_so(expr):
    close = explain(expr, b")", label="')'")
    assert close.completes and 'the terminal ")" in rule factor' in close.sentence and "left open" in close.sentence
    dead = explain(expr, b"a", label="'a'")
    assert dead.dead and dead.node == EMPTY and "no sentence" in dead.sentence and not dead.pairs
    across = explain(expr, b"1)", label="'1)'")
    assert across.spans_boundary and "reach into the next" in across.sentence


STRING = r"""root ::= "{" ws "\"name\"" ws ":" ws name ws "}"
name ::= "\"" ([^"\\] | "\\" ["\\])* "\""
ws ::= [ \t\n]*
"""


def test_explanation_lines_read_as_short_bullets():
    """Issue 35.4: one line per place, a repetition named once ("more of the same"), plain words."""
    strings = Displacer(compile_grammar(STRING).gnf)
    inside = explain(strings, b"ab", label="'ab'", peers=["'x'"], more_peers=3)
    assert inside.lines == [
        "Interchangeable with 'x' and 3 more: the grammar never tells them apart",
        r'Comes where the repetition ([^"\\] | "\\" ["\\])* in rule name (line 2) is expected',
        "Then: more of the same repetition in rule name (line 2)",
        "Or it completes what it started: nothing of it is left open",
    ]
    quote = explain(strings, b'" ', label="'\" '")
    assert quote.lines[0].startswith("Comes where '\"' of the terminal") and quote.lines[1].startswith("Or comes")
    assert any(line.startswith("… and ") and line.endswith("more places") for line in quote.lines)
    assert quote.lines[-1] == "It can also finish one part and reach into the next"
    for e in (inside, quote, explain(expr_displacer(), b")", label="')'")):
        assert all(len(line) < 110 and "pair" not in line and "σ" not in line for line in e.lines), e.lines
        assert len(set(e.lines)) == len(e.lines) and not INTERNAL.search(" ".join(e.lines))
    assert explain(expr_displacer(), b")").lines[-1] == "Then nothing: it completes what it started"


def expr_displacer() -> Displacer:
    return Displacer(compile_grammar(EXPR).gnf)


def test_class_reason_in_plain_words():
    from cfgzip_lab.classes.explain import class_reason

    assert class_reason(3, 12) == (
        "all 12 tokens of the class fit the grammar in exactly the same 3 ways (the details list them), "
        "and no other token does"
    )
    assert "exactly these 1 way " in class_reason(1, 1) and "alone in its class" in class_reason(1, 1)


def test_compare_names_a_pair_one_has_and_the_other_lacks(expr):
    same = compare_tokens(expr, b"+", b"-")
    assert same.same and "interchangeable" in same.sentence and not same.only_a
    diff = compare_tokens(expr, b"+", b"*", labels=("'+'", "'*'"))
    assert not diff.same and diff.only_a and diff.only_b
    assert "'+' and '*' are in different classes: '+' can come where the repetition" in diff.sentence
    assert "'*' cannot do that" in diff.sentence and not INTERNAL.search(diff.sentence)
    # the pairs named really are in one displacement and not in the other
    listed_plus = {p.gnf_text() for p in explain(expr, b"+").pairs}
    listed_star = {p.gnf_text() for p in explain(expr, b"*").pairs}
    assert {p.gnf_text() for p in diff.only_a} <= listed_plus - listed_star
    assert {p.gnf_text() for p in diff.only_b} <= listed_star - listed_plus
    dead = compare_tokens(expr, b"a", b"1", labels=("'a'", "'1'"))
    assert not dead.same and dead.sentence.startswith("'a' is in no sentence of the grammar, '1' is")


def test_token_text_escapes():
    assert token_text(b"a\n\t\\") == "'a\\n\\t\\\\'"
    assert token_text(b"\xff") == "'\\xff'"


@pytest.fixture(scope="module")
def json_llama3():
    from cfgzip_lab.bundled import bundled_grammars
    from cfgzip_lab.vocab_sources import load_vocab

    compiled = compile_grammar(bundled_grammars()["json"].read_text(encoding="utf-8"))
    vocab = load_vocab("llama3")
    result = build_classes(compiled, vocab)
    return compiled, vocab, result


def test_explain_token_names_class_peers(json_llama3):
    compiled, vocab, result = json_llama3
    classes, displacer = result.classes, result.displacer
    tid = vocab.token_bytes.index(b"5")
    e = explain_token(displacer, vocab, classes, tid)
    peers = classes.members(classes.class_of[tid])
    assert peers.size > 3, "the digits 1-9 share a class under JSON"
    assert e.sentence.startswith("'5', ") and f"{peers.size - 3:,} more tokens are interchangeable: all" in e.sentence
    assert not INTERNAL.search(e.sentence) and "rule integer" in e.sentence
    alone = vocab.token_bytes.index(b'",')
    if classes.class_sizes()[classes.class_of[alone]] == 1:
        assert "interchangeable" not in explain_token(displacer, vocab, classes, alone).sentence
    stop = explain_token(displacer, vocab, classes, vocab.stop_ids[0])
    assert "stop token" in stop.sentence


def test_compare_agrees_with_the_classes(json_llama3):
    """compare_tokens says 'interchangeable' exactly for tokens of one class (real vocabulary)."""
    compiled, vocab, result = json_llama3
    classes, displacer = result.classes, result.displacer
    rng = random.Random(7)
    normal = [t for t in range(vocab.vocab_size) if vocab.token_bytes[t] and int(vocab.kinds[t]) == 0]
    pairs = [(rng.choice(normal), rng.choice(normal)) for _ in range(150)]
    # and pairs from one (non-blocked) class
    sizes = classes.class_sizes()
    for k in [k for k in range(classes.num_classes) if sizes[k] > 1][:50]:
        a, b = classes.members(k)[:2]
        pairs.append((int(a), int(b)))
    seen_same = seen_diff = 0
    for a, b in pairs:
        c = compare_tokens(displacer, vocab.token_bytes[a], vocab.token_bytes[b])
        assert c.same == (classes.class_of[a] == classes.class_of[b]), (a, b, c.sentence)
        bare = c.sentence.replace(c.labels[0], "").replace(c.labels[1], "")
        assert not INTERNAL.search(bare), c.sentence
        seen_same += c.same
        seen_diff += not c.same
    assert seen_same >= 50 and seen_diff >= 20


def test_explain_class_is_its_representative(json_llama3):
    compiled, vocab, result = json_llama3
    classes, displacer = result.classes, result.displacer
    k = int(classes.class_of[vocab.token_bytes.index(b"5")])
    by_class = explain_class(displacer, vocab, classes, k)
    by_rep = explain_token(displacer, vocab, classes, int(classes.representatives[k]))
    assert by_class.sentence == by_rep.sentence and by_class.node == by_rep.node
    with pytest.raises(IndexError, match="does not exist"):
        explain_class(displacer, vocab, classes, classes.num_classes)
