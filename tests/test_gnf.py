"""Language equivalence: XGrammar (the referee) ⇔ our byte CFG ⇔ our factored GNF.

Strings: every string over a small alphabet up to length 2, samples of the
grammar's language with their prefixes, and single-byte mutations of those.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from grammar_tools import earley_accepts, mutations, sample, xgrammar_matcher
from paths import BUNDLED, BUNDLED_DIR, THIRD_PARTY, third_party_grammars

from cfgzip_lab.grammar.cfg import CFG, ByteSet
from cfgzip_lab.grammar.gnf import is_gnf, to_gnf
from cfgzip_lab.pipeline import compile_grammar

OURS = BUNDLED
THEIRS = third_party_grammars()


def xgrammar_verdicts(matcher, data: bytes) -> tuple[bool, bool]:
    """(valid prefix, complete sentence) by XGrammar's matcher."""
    matcher.reset()
    ok = matcher.accept_string(data)
    return ok, ok and matcher.is_terminated()


def probe_strings(compiled, text_samples: list[str], rng: random.Random) -> list[bytes]:
    alphabet = bytes(sorted({min(a) for a in compiled.gnf.atoms}))
    strings = [b""] + [bytes([b]) for b in alphabet]
    small = alphabet[:24]
    strings += [bytes(p) for p in itertools.product(small, repeat=2)]
    for s in text_samples:
        data = s.encode("utf-8", "surrogatepass")
        strings.append(data)
        strings += [data[:k] for k in sorted({rng.randrange(len(data) + 1) for _ in range(4)})]
        strings += mutations(data, rng, alphabet, 4)
    return strings


@pytest.mark.parametrize("path", OURS + THEIRS, ids=lambda p: p.name if p in OURS else str(p.relative_to(THIRD_PARTY)))
def test_xgrammar_cfg_and_gnf_agree(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    compiled = compile_grammar(text)
    assert is_gnf(compiled.gnf)
    rng = random.Random(7)
    samples = [sample(compiled.ast, rng, free_depth=4) for _ in range(6)]
    sample_dir = BUNDLED_DIR / "samples" / path.stem
    if path in OURS and sample_dir.is_dir():
        samples += [p.read_text(encoding="utf-8")[:300] for p in sorted(sample_dir.glob("*.txt"))[:2]]
    lookaheads = any("lookahead" in w.message for w in compiled.warnings)
    matcher = xgrammar_matcher(text)
    for data in probe_strings(compiled, samples, rng):
        gnf_prefix = compiled.gnf.accepts(data, prefix=True)
        gnf_full = compiled.gnf.accepts(data)
        if len(data) <= 60:  # Earley in Python is slow; the GNF vs XGrammar check covers long ones
            assert earley_accepts(compiled.cfg, data) == gnf_full, data
            assert earley_accepts(compiled.cfg, data, prefix=True) == gnf_prefix, data
        if lookaheads:
            continue  # dropped lookaheads make our language a superset: checked by the verifier
        xg_prefix, xg_full = xgrammar_verdicts(matcher, data)
        assert (gnf_prefix, gnf_full) == (xg_prefix, xg_full), (
            data,
            "ours",
            gnf_prefix,
            gnf_full,
            "xgrammar",
            xg_prefix,
            xg_full,
        )


def B(text: str) -> ByteSet:
    return ByteSet.of(text.encode())


def test_nullable_terminal_repetition_is_nullable() -> None:
    """A trap from the reference implementation: ``ws ::= [ ]*`` treated as non-nullable."""
    compiled = compile_grammar('root ::= "a" ws "b"\nws ::= [ ]*\n')
    assert compiled.gnf.accepts(b"ab") and compiled.gnf.accepts(b"a   b")


def test_bounded_repetition_is_honoured() -> None:
    compiled = compile_grammar('root ::= "x"{2,4}\n')
    assert [compiled.gnf.accepts(b"x" * n) for n in range(6)] == [False, False, True, True, True, False]


def test_backslash_in_class_is_kept() -> None:
    compiled = compile_grammar("root ::= [\\\\'tn]+\n")
    for ok in (b"\\", b"'", b"t", b"n", b"\\'tn"):
        assert compiled.gnf.accepts(ok)
    assert not compiled.gnf.accepts(b"\n")


def test_root_inside_a_rule() -> None:
    compiled = compile_grammar('root ::= "(" root ")" | "x"\n')
    assert compiled.gnf.accepts(b"((x))") and not compiled.gnf.accepts(b"(x")
    assert is_gnf(compiled.gnf)


def test_direct_and_indirect_left_recursion() -> None:
    cfg = CFG(
        "root",
        {
            "root": [("E",)],
            "E": [("E", B("+"), "T"), ("T",)],
            "T": [("A", B("*")), (B("1"),)],
            "A": [("T", B("!")), ("E", B("?"))],
        },
    )
    gnf = to_gnf(cfg)
    assert is_gnf(gnf)
    rng = random.Random(3)
    for _ in range(400):
        data = bytes(rng.choice(b"1+*!?") for _ in range(rng.randrange(1, 8)))
        assert gnf.accepts(data) == earley_accepts(cfg, data), data


def test_empty_language_and_epsilon() -> None:
    assert compile_grammar('root ::= ""\n').gnf.accepts(b"")
    assert not compile_grammar('root ::= ""\n').gnf.accepts(b"a")
    assert compile_grammar('root ::= "a"?\n').gnf.accepts_empty


def test_steps_are_recorded_with_sizes() -> None:
    compiled = compile_grammar((BUNDLED_DIR / "json.ebnf").read_text())
    names = [s.name for s in compiled.gnf.steps]
    assert names == [
        "byte CFG",
        "terminal lifting",
        "useless symbols",
        "ε-rules",
        "unit rules",
        "left recursion",
        "leading substitution",
        "merging",
    ]
    assert all(s.nonterminals > 0 and s.productions > 0 for s in compiled.gnf.steps)


def test_precedence_chain_stays_factored() -> None:
    """Nine precedence levels with a nullable comment-bearing ws: listed GNF would be huge."""
    levels = 9
    rules = ["root ::= e0", 'ws ::= ([ \\t\\n] | "/*" [^*]* "*/")*', 'atom ::= [0-9]+ | "(" ws e0 ws ")"']
    for i in range(levels):
        nxt = f"e{i + 1}" if i + 1 < levels else "atom"
        rules.append(f'e{i} ::= {nxt} (ws "{"+-*/%<>&|"[i]}" ws {nxt})*')
    compiled = compile_grammar("\n".join(rules) + "\n")
    gnf = compiled.gnf
    assert gnf.num_productions > 20 * gnf.dag_nodes  # what listing would cost vs what we hold
    assert gnf.dag_nodes < 5000
    assert gnf.accepts(b"1 + 2*(3 /* c */ % 4)")


def test_empty_language_is_a_diagnostic_at_root() -> None:
    from cfgzip_lab.grammar.diagnostics import GrammarError

    text = "# comment\nroot ::= (y{2,3}){2}\ny ::= root\n"
    with pytest.raises(GrammarError) as info:
        compile_grammar(text)
    (diag,) = info.value.diagnostics
    assert (diag.line, diag.column) == (2, 1) and "language of 'root' is empty" in diag.message


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_word_dag_nodes_are_canonical(path: Path) -> None:
    """Interning is only canonical (equal ids ⇔ equal sets) if every node's edges are
    sorted by symbol with no symbol twice; a lifted terminal once broke the order."""
    store = compile_grammar(path.read_text(encoding="utf-8")).gnf.store
    for _, edges in store.nodes:
        symbols = [s for s, _ in edges]
        assert symbols == sorted(set(symbols))


def test_byte_classes_are_the_membership_signatures():
    """byte_classes (refinement, one-member sets applied together) groups bytes, and token bits, by the
    sets they are in (bytes in no set: one atom; token bits in no set: none), ordered by smallest member,
    on random collections of ranges, single bytes, token bits, empty and arbitrary sets."""
    import random

    from cfgzip_lab.grammar.cfg import TOKEN_BASE, ByteSet, byte_classes

    rng = random.Random(7)
    for _ in range(500):
        sets = []
        for _ in range(rng.randrange(0, 30)):
            kind = rng.random()
            if kind < 0.4:
                bits = 1 << rng.randrange(TOKEN_BASE + (8 if rng.random() < 0.1 else 0))
            elif kind < 0.7:
                lo = rng.randrange(256)
                bits = ByteSet.range(lo, rng.randrange(lo, 256)).bits
            elif kind < 0.75:
                bits = 0
            else:
                bits = rng.getrandbits(TOKEN_BASE + (16 if rng.random() < 0.1 else 0))
            sets.append(ByteSet(bits))
        groups: dict[tuple, int] = {}
        named = 0
        for s in sets:
            named |= s.bits
        for bit in list(range(TOKEN_BASE)) + [b for b in range(TOKEN_BASE, named.bit_length()) if named >> b & 1]:
            signature = (bit >= TOKEN_BASE,) + tuple(bool(s.bits >> bit & 1) for s in sets)
            groups[signature] = groups.get(signature, 0) | 1 << bit
        want = sorted(groups.values(), key=lambda block: block & -block)
        assert [a.bits for a in byte_classes(sets)] == want


def _gnf_rows(g):
    words = [{a: sorted(g.store.words(t, limit=50)) for a, t in row.items()} for row in g.table]
    steps = [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in g.steps]
    return g.names, [a.bits for a in g.atoms], g.atom_of, words, g.origins, g.merged_from, steps


def test_grammars_with_the_same_byte_sets_lift_as_each_alone():
    """The lifting keeps per byte-set partition what it reads of it (gnf._ATOMS: atoms, each set's atom
    edges and name): grammars with the same byte sets in one process, in any order and either store,
    give the normal form each gives alone (names, atoms, rows, origins, steps)."""
    from cfgzip_lab.grammar import gnf

    texts = [
        'root ::= "ab" [0-9]+ "b"\n',
        'root ::= [0-9] "b" "a" | x\nx ::= "ab"* [0-9]\n',
        'root ::= ("b" | [0-9])* "a"\n',
        'root ::= "ab" [0-9]+ "b" ""\n',
        'root ::= [0-9] ("a" | "b")\n',
    ]
    for compiled_store in (False, None):
        wants = []
        for text in texts:
            gnf._ATOMS.clear()
            wants.append(_gnf_rows(compile_grammar(text, compiled_store=compiled_store).gnf))
        gnf._ATOMS.clear()
        for i in [0, 1, 2, 3, 4, 4, 2, 0, 3, 1]:
            assert _gnf_rows(compile_grammar(texts[i], compiled_store=compiled_store).gnf) == wants[i], texts[i]
        assert len(gnf._ATOMS) == 1  # the five share one partition
