"""Dead ends (cfgzip_lab/grammar/dead_ends.py): a path that consumes bytes and then can never
finish is kept exactly as XGrammar has it — decoding may enter it, then nothing is allowed —
with a warning at its place; a non-productive symbol that nothing can reach after consumed
bytes is harmless and kept without one. Both checked mask for mask against XGrammar."""

from __future__ import annotations

import pytest

from cfgzip_lab.engine import compile_engines
from cfgzip_lab.grammar.dead_ends import dead_ends
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.grammar.ebnf import parse_ebnf
from cfgzip_lab.grammar.lower import lower
from cfgzip_lab.pipeline import build_classes, bundled_grammars, compile_grammar
from cfgzip_lab.verify import verify_lossless
from cfgzip_lab.vocab_sources import load_vocab

# grammar text, (line, column) of the warning, words of the message
DEAD_ENDS = [
    ('root ::= "a" [] | "b"\n', (1, 14), "matches nothing"),
    ('root ::= "a" x | "b"\nx ::= "c" x\n', (1, 14), "recurses with no way out"),
    ('root ::= y | "b"\ny ::= "a" y\n', (2, 11), "recurses with no way out"),
    ('root ::= "b" | ("a" [^\\x00-\\U0010FFFF])\n', (1, 21), "matches nothing"),
    ('root ::= "b" | "q"? ws? z\nws ::= " "\nz ::= "x" z\n', (1, 25), "rule z"),
    ('root ::= "b" | x "a"\nx ::= "c" x\n', (2, 11), "rule x"),
]
# non-productive symbols that no consumed byte can reach: kept, and lossless
KEPT = [
    'root ::= [] | "b"\n',
    'root ::= "b" | x\nx ::= x\n',
]


@pytest.mark.parametrize("text, where, words", DEAD_ENDS, ids=range(len(DEAD_ENDS)))
def test_text__position__message__warned(text, where, words):
    compiled = compile_grammar(text)
    (first, *_) = [w for w in compiled.warnings if "dead end" in w.message]
    assert first.severity == "warning"
    assert (
        (first.line, first.column) == where
        and words in first.message
        and "XGrammar lets decoding go in" in first.message
    )


def test_an_empty_language_is_still_refused():
    with pytest.raises(GrammarError) as caught:
        compile_grammar('root ::= "a" root\n')
    assert "the language of 'root' is empty" in caught.value.diagnostics[0].message


@pytest.mark.parametrize("text", KEPT, ids=range(len(KEPT)))
def test_unreachable_non_productive_symbols_are_kept(text):
    assert dead_ends(lower(parse_ebnf(text))) == []
    compile_grammar(text)


def test_no_bundled_grammar_has_a_dead_end():
    for name, path in bundled_grammars().items():
        assert dead_ends(lower(parse_ebnf(path.read_text(encoding="utf-8")))) == [], name


@pytest.fixture(scope="module")
def smollm2():
    return load_vocab("smollm2")


@pytest.mark.slow
def test_xgrammar_enters_a_dead_end_and_so_do_both_engines(smollm2):
    """Plain XGrammar accepts the token 'a' where no string can ever finish, then allows nothing;
    the compressed and native engines do exactly the same."""
    from cfgzip_lab.native import build_native_engine

    text = 'root ::= "a" [] | "b"\n'
    compiled = compile_grammar(text)
    result = build_classes(compiled, smollm2)
    engines = compile_engines(text, smollm2, result.classes)
    native = build_native_engine(compiled, smollm2, result.classes, classing=result, xgrammar_engines=engines)
    (a,) = smollm2.encode("a")
    for matcher in (engines.plain(), engines.compressed(), native.matcher()):
        assert matcher.accept_token(a)
        assert not matcher.next_vocab_bitmask().any() and not matcher.is_completed()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["compressed", "native"])
@pytest.mark.parametrize("text", [t for t, _, _ in DEAD_ENDS], ids=range(len(DEAD_ENDS)))
def test_dead_ends_are_lossless(text, engine, smollm2):
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.verify import verify_engines

    compiled = compile_grammar(text)
    result = build_classes(compiled, smollm2)
    engines = compile_engines(text, smollm2, result.classes)
    native = build_native_engine(compiled, smollm2, result.classes, classing=result, xgrammar_engines=engines)
    candidate = native.matcher if engine == "native" else None
    docs = ["a", "acc", "b", "qx", "xx", "ca", "cca"]
    report = verify_engines(engines, candidate=candidate, candidate_name=engine, walks=12, steps=8, seed=0, docs=docs)
    assert report.ok and report.steps_checked > 10, report.first_mismatch


@pytest.mark.slow
@pytest.mark.parametrize("text", KEPT, ids=range(len(KEPT)))
def test_kept_grammars_are_lossless(text, smollm2):
    classes = build_classes(compile_grammar(text), smollm2).classes
    report = verify_lossless(text, smollm2, classes, walks=8, steps=6)
    assert report.ok and report.steps_checked > 0, report.first_mismatch


# -- the fixpoints against their definitions -------------------------------------------------------
def _derives(symbol, found: set[str]) -> bool:
    """A byte (of a non-empty class), or a nonterminal already found."""
    from cfgzip_lab.grammar.cfg import ByteSet

    return symbol.bits != 0 if isinstance(symbol, ByteSet) else symbol in found


def _swept_productive(cfg) -> set[str]:
    """PRODUCTIVE by its definition, swept until nothing changes (the worklist's reference)."""
    ok = _derives
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in cfg.rules.items():
            counted = cfg.counted.get(name)
            got = (
                (counted.min == 0 or counted.item in found)
                if counted
                else any(all(ok(s, found) for s in r) for r in alts)
            )
            if got and name not in found:
                found.add(name)
                changed = True
    return found


def _swept_nonempty(cfg, productive) -> set[str]:
    ok = _derives
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in cfg.rules.items():
            counted = cfg.counted.get(name)
            if counted:
                got = name in productive and counted.item in found and counted.item in productive
            else:
                got = any(all(ok(s, productive) for s in r) and any(ok(s, found) for s in r) for r in alts)
            if got and name not in found:
                found.add(name)
                changed = True
    return found


def _fixpoint_inputs():
    import random

    from paths import CORPORA, third_party_grammars

    texts = [(n, p.read_text(encoding="utf-8"), "ebnf") for n, p in bundled_grammars().items()]
    texts += [(t, t, "ebnf") for t, _, _ in DEAD_ENDS] + [(t, t, "ebnf") for t in KEPT]
    texts += [('root ::= "a" x{2,4} | y{0,3}\nx ::= x "b"\ny ::= "c"\n',) * 2 + ("ebnf",)]  # counted, one dead item
    rng = random.Random(5)
    ebnf = sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))
    texts += [(p.name, p.read_text(encoding="utf-8"), "ebnf") for p in rng.sample(ebnf, min(60, len(ebnf)))]
    texts += [(p.name, p.read_text(encoding="utf-8"), "auto") for p in third_party_grammars()]
    schemas = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("*.json") if ".instance" not in p.name)
    texts += [
        (p.name, p.read_text(encoding="utf-8"), "json_schema") for p in rng.sample(schemas, min(40, len(schemas)))
    ]
    return texts


def test_the_worklist_fixpoints_are_the_definitions():
    """productive_nonterminals and the non-empty set, by worklist, equal their definitions swept to a
    fixpoint on every bundled grammar, the dead-end examples and a sample of inputs others wrote."""
    from cfgzip_lab.grammar import dead_ends as module
    from cfgzip_lab.grammar.sources import to_ebnf

    checked = 0
    for name, text, kind in _fixpoint_inputs():
        try:
            ebnf = to_ebnf(text, kind).ebnf if kind != "ebnf" else text
            cfg = lower(parse_ebnf(ebnf))
        except (GrammarError, ValueError):
            continue  # refused before the fixpoints run
        productive = module.productive_nonterminals(cfg)
        assert productive == _swept_productive(cfg), name
        assert module._nonempty(cfg, productive) == _swept_nonempty(cfg, productive), name
        checked += 1
    assert checked > 100


def test_the_shortcut_without_non_productive_symbols_finds_what_the_walk_finds(monkeypatch):
    """dead_ends returns [] at once where every symbol is productive; the walk finds the same on the
    fixpoint inputs (and finds dead ends where the shortcut does not apply)."""
    from cfgzip_lab.grammar import dead_ends as module
    from cfgzip_lab.grammar.sources import to_ebnf

    shortcut, walked = 0, 0
    for name, text, kind in _fixpoint_inputs():
        try:
            ebnf = to_ebnf(text, kind).ebnf if kind != "ebnf" else text
            cfg = lower(parse_ebnf(ebnf))
        except (GrammarError, ValueError):
            continue
        got = module.dead_ends(cfg)
        with monkeypatch.context() as m:
            m.setattr(module, "_every_symbol_productive", lambda cfg, productive: False)
            want = module.dead_ends(cfg)
        assert got == want, name
        if module._every_symbol_productive(cfg, module.productive_nonterminals(cfg)):
            shortcut += 1
        else:
            walked += bool(want)
    assert shortcut > 50 and walked > 5
