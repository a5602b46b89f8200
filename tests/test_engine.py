"""Plain and compressed engines over real XGrammar: one interface, same masks, batch = single."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xgrammar as xgr
from paths import THIRD_PARTY
from reference_tools import JSON_BUILTIN_GRAMMAR as JSON_GRAMMAR
from toy_vocab import JSON_PIECES

from cfgzip_lab.classes.classing import BLOCKED, NORMAL, STOP, TokenClasses
from cfgzip_lab.engine import (
    BatchMatcher,
    CompressedMatcher,
    Engine,
    GrammarCompileError,
    PlainMatcher,
    compile_engines,
    compressed_tokenizer_info,
    plain_tokenizer_info,
    shadow_prefixes,
)
from cfgzip_lab.expand import unpack_bitmask
from cfgzip_lab.verify import duplicate_classes, identity_classes
from cfgzip_lab.vocab import PADDING, SPECIAL, vocab_from_bytes

PARENS = 'root ::= item+\nitem ::= "(" item* ")" | "a" | "<s>"\n'

TOY_TOKENS = JSON_PIECES + [
    b"((",
    b"a)",
    b"<s>",
    b"\xe2\x80",
    b"\x9c",
    b"\xc3\xa9",
    b"10",
    b"a",  # a byte-identical duplicate of id 8
    b"",
    b"",
    b"",  # 29 stop, 30 special, 31 padding (empty, listed in neither)
]


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOY_TOKENS, stop_ids=[29], special_ids=[30], vocab_size=36, name="toy")


def bits(mask: torch.Tensor, size: int) -> set[int]:
    return set(np.flatnonzero(unpack_bitmask(mask, size)).tolist())


def walk(engine: Engine, tokens: list[int]) -> None:
    for t in tokens:
        assert engine.accept_token(t), t


# -- what XGrammar does with empty, special and stop tokens (the engines rely on it) ---------
def test_xgrammar_marks_empty_and_padding_ids_special_unless_stop():
    vocab = [b"a", b"", b"<s>", b"</s>", b"", b"<|endoftext|>"]
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=8, stop_token_ids=[4])
    assert info.special_token_ids == [1, 6, 7]  # empty text and ids past the list
    assert info.stop_token_ids == [4]  # an empty stop id is a stop id, not special
    guessed = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=None)
    assert guessed.stop_token_ids == [3, 5]  # None: guessed from the text
    assert xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=[]).stop_token_ids == []


def test_xgrammar_matches_special_looking_text_and_keeps_tail_bits():
    info = xgr.TokenizerInfo([b"a", b"<s>", b"", b"</s>"], xgr.VocabType.RAW, stop_token_ids=[3])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar('root ::= "<s>" "a"*'))
    mask = xgr.allocate_token_bitmask(1, 4)
    matcher.fill_next_token_bitmask(mask)
    assert mask[0, 0].item() & 0xF == 0b0010  # "<s>" is text in a RAW vocabulary
    assert mask[0, 0].item() >> 4 == -1 >> 4  # bits past vocab_size are left as they were


def test_tokenizer_infos_blank_special_padding_and_blocked(toy):
    info = plain_tokenizer_info(toy)
    assert info.stop_token_ids == [29]
    assert set(info.special_token_ids) == {30, 31, 32, 33, 34, 35}
    classes = duplicate_classes(toy)
    cinfo = compressed_tokenizer_info(toy, classes)
    assert cinfo.vocab_size == classes.num_classes + len(shadow_prefixes(toy, classes))
    assert cinfo.stop_token_ids == np.flatnonzero(classes.class_kind == STOP).tolist()
    assert cinfo.special_token_ids == np.flatnonzero(classes.class_kind == BLOCKED).tolist()


# -- one interface -------------------------------------------------------------------------
@pytest.mark.parametrize("make", [identity_classes, duplicate_classes])
@pytest.mark.parametrize(
    "grammar, path",
    [
        (JSON_GRAMMAR, [16, 8, 17, 7, 2, 12, 27, 6, 14, 6, 11, 3, 1]),  # {"a": [110,true,"a"]}
        (PARENS, [19, 21, 8, 20, 22, 20, 23, 8]),  # ((( a)a))<s>a
    ],
)
def test_compressed_mask_equals_plain_along_a_path(toy, make, grammar, path):
    engines = compile_engines(grammar, toy, make(toy))
    plain, compressed = engines.plain(), engines.compressed()
    for token in path + [29]:
        p, c = plain.next_vocab_bitmask(), compressed.next_vocab_bitmask()
        assert p.shape == c.shape == (engines.expander.vocab_bitmask_size,)
        assert torch.equal(p, c)
        assert token in bits(p, toy.vocab_size)
        assert plain.accept_token(token) and compressed.accept_token(token)
        assert plain.is_terminated() == compressed.is_terminated()
    assert plain.is_terminated() and compressed.is_terminated()


def test_special_and_padding_are_never_allowed_nor_accepted(toy):
    # "<s>" is text (id 23); the SPECIAL id 30 and the padding ids are not, in either engine.
    engines = compile_engines(PARENS, toy, duplicate_classes(toy))
    blocked = np.flatnonzero((toy.kinds == SPECIAL) | (toy.kinds == PADDING)).tolist()
    for engine in (engines.plain(), engines.compressed()):
        for token in [23, 8, 19]:
            assert not bits(engine.next_vocab_bitmask(), toy.vocab_size) & set(blocked)
            assert not any(engine.accept_token(b) for b in blocked)
            assert not engine.accept_token(-1) and not engine.accept_token(toy.vocab_size)
            assert engine.accept_token(token)


def test_stop_bits_and_termination(toy):
    engines = compile_engines(PARENS, toy, duplicate_classes(toy))
    for engine in (engines.plain(), engines.compressed()):
        assert 29 not in bits(engine.next_vocab_bitmask(), toy.vocab_size)  # nothing yet
        assert not engine.accept_token(29)
        walk(engine, [8])
        assert engine.is_completed() and not engine.is_terminated()
        assert 29 in bits(engine.next_vocab_bitmask(), toy.vocab_size)
        walk(engine, [29])
        assert engine.is_terminated() and not engine.accept_token(8)
        with pytest.raises(RuntimeError):
            engine.next_vocab_bitmask()  # XGrammar refuses to fill after the stop token
        engine.rollback(1)
        assert not engine.is_terminated()
        engine.reset()
        assert not engine.is_completed()


def test_rollback_restores_the_mask(toy):
    engines = compile_engines(JSON_GRAMMAR, toy, duplicate_classes(toy))
    for engine in (engines.plain(), engines.compressed()):
        walk(engine, [16, 8])
        before = engine.next_vocab_bitmask()
        walk(engine, [17, 7, 12])
        engine.rollback(3)
        assert torch.equal(engine.next_vocab_bitmask(), before)
        assert not engine.accept_token(18)  # a raw newline inside a string: rejected, state stays
        assert torch.equal(engine.next_vocab_bitmask(), before)


def test_native_masks_and_apply(toy):
    classes = duplicate_classes(toy)
    engines = compile_engines(JSON_GRAMMAR, toy, classes)
    plain, compressed = engines.plain(), engines.compressed()
    assert isinstance(plain, PlainMatcher) and isinstance(compressed, CompressedMatcher)
    pmask, cmask = plain.allocate_bitmask(), compressed.allocate_bitmask()
    assert pmask.shape == (1, plain.bitmask_size) and plain.bitmask_size == 2  # 36 tokens
    assert cmask.shape == (1, compressed.bitmask_size)
    assert compressed.native_size == classes.num_classes + len(shadow_prefixes(toy, classes))
    plain.fill_next_token_bitmask(pmask)
    compressed.fill_next_token_bitmask(cmask)
    assert bits(cmask, classes.num_classes) == {int(classes.class_of[t]) for t in (0, 2, 16)}  # { [ {"
    logits = torch.randn(2, toy.vocab_size)
    a = plain.apply_bitmask_inplace(logits.clone(), pmask)
    b = compressed.apply_bitmask_inplace(logits.clone(), cmask)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.isfinite(a[:, [0, 2, 16]]).all() and torch.isinf(a[:, 1]).all()


def test_compressed_engine_is_fed_classes(toy):
    # Byte duplicates share a class: feeding either id moves the compressed matcher alike.
    classes = duplicate_classes(toy)
    assert classes.class_of[8] == classes.class_of[28]
    engine = compile_engines(PARENS, toy, classes).compressed()
    assert engine.native_id(28) == engine.native_id(8) == engine.class_of(28)
    assert engine.native_id(30) == -1  # BLOCKED
    walk(engine, [28, 8, 28])


# -- batches -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["plain", "compressed"])
def test_batch_agrees_with_single_engines(toy, kind):
    engines = compile_engines(JSON_GRAMMAR, toy, duplicate_classes(toy))
    make_single = engines.plain if kind == "plain" else engines.compressed
    batch = engines.plain_batch(4) if kind == "plain" else engines.compressed_batch(4)
    assert isinstance(batch, BatchMatcher) and batch.kind == kind and batch.batch_size == 4
    singles = [make_single() for _ in range(4)]
    paths = [
        [16, 8, 17, 12, 1, 29],
        [2, 12, 27, 6, 14, 3, 29],
        [0, 1, 29],
        [2, 11, 6, 15, 6, 2, 3, 3, 29],
    ]
    position = [0] * 4  # tokens each row has accepted
    rng = np.random.default_rng(0)
    for step in range(40):
        masks = batch.next_vocab_bitmask()
        for i, single in enumerate(singles):
            expected = torch.zeros_like(masks[i]) if single.is_terminated() else single.next_vocab_bitmask()
            assert torch.equal(masks[i], expected), (step, i)
        if all(batch.is_terminated()):
            break
        if step in (3, 7):  # roll rows back by different amounts (terminated ones included)
            counts = [min(int(rng.integers(0, 3)), n) for n in position]
            batch.rollback(counts)
            for single, c in zip(singles, counts):
                single.rollback(c)
            position = [n - c for n, c in zip(position, counts)]
            continue
        tokens = [p[n] if n < len(p) else 30 for p, n in zip(paths, position)]  # 30: SPECIAL
        accepted = batch.accept_tokens(tokens)
        assert accepted == [s.accept_token(t) for s, t in zip(singles, tokens)]
        assert accepted == [n < len(p) for p, n in zip(paths, position)]
        position = [n + a for n, a in zip(position, accepted)]
    assert batch.is_terminated() == [True] * 4
    batch.reset(0)
    assert batch.is_terminated() == [False, True, True, True]


def test_batch_native_fill_with_indices(toy):
    engines = compile_engines(PARENS, toy, duplicate_classes(toy))
    batch = engines.compressed_batch(3)
    batch.accept_tokens([8, 19, 8])
    batch.accept_tokens([29, 8, 8])
    native = batch.allocate_bitmask()
    native.fill_(-1)
    batch.fill_next_token_bitmask(native, [1, 2])  # row 0 terminated: left out
    assert native[0].eq(-1).all()
    single = engines.compressed()
    walk(single, [19, 8])
    own = single.allocate_bitmask()
    single.fill_next_token_bitmask(own)
    assert torch.equal(native[1], own[0])


# -- compilation ---------------------------------------------------------------------------
def test_compilation_is_cached_by_grammar_vocab_and_classes(toy):
    classes = duplicate_classes(toy)
    a = compile_engines(PARENS, toy, classes)
    b = compile_engines(PARENS, toy, duplicate_classes(toy))
    assert a.plain_grammar is b.plain_grammar
    assert a.compressed_grammar is b.compressed_grammar
    c = compile_engines(PARENS, toy, identity_classes(toy))
    assert c.plain_grammar is a.plain_grammar and c.compressed_grammar is not a.compressed_grammar


def test_bad_grammar_and_bad_classes_are_refused(toy):
    with pytest.raises(GrammarCompileError, match="line 1"):
        compile_engines('root ::= "a" b', toy).plain()
    classes = duplicate_classes(toy)
    short = TokenClasses(classes.class_of[:-1], classes.representatives, classes.class_kind)
    with pytest.raises(ValueError, match="cover 35 ids"):
        compile_engines(PARENS, toy, short)
    bad_rep = TokenClasses(classes.class_of, classes.representatives[::-1].copy(), classes.class_kind)
    with pytest.raises(ValueError, match="member of class"):
        compile_engines(PARENS, toy, bad_rep)
    with pytest.raises(ValueError, match="TokenClasses"):
        compile_engines(PARENS, toy).compressed()


def test_duplicate_classes_shape(toy):
    classes = duplicate_classes(toy)
    kinds = classes.class_kind
    assert kinds[0] == BLOCKED and kinds[1] == STOP and (kinds[2:] == NORMAL).all()
    assert classes.num_classes == 2 + len(set(TOY_TOKENS[:29]))
    assert classes.representatives[classes.class_of[28]] == 8  # ties go to the lowest id


# -- a real vocabulary ---------------------------------------------------------------------
@pytest.mark.slow
def test_llama3_json_engines_agree_on_a_document():
    vocab_mod = pytest.importorskip("cfgzip_lab.vocab")
    try:
        vocab = vocab_mod.load_vocab("llama3")
    except Exception as err:  # the registry or its files are not there
        pytest.skip(f"llama3 vocabulary unavailable: {err}")
    engines = compile_engines(JSON_GRAMMAR, vocab, duplicate_classes(vocab))
    plain, compressed = engines.plain(), engines.compressed()
    blocked = (vocab.kinds == SPECIAL) | (vocab.kinds == PADDING)
    for token in vocab.encode('{"name": "cfgzip", "tags": ["a", 1.5e3, null], "ok": true}'):
        p = plain.next_vocab_bitmask()
        assert torch.equal(p, compressed.next_vocab_bitmask())
        assert not (unpack_bitmask(p, vocab.vocab_size) & blocked).any()
        assert plain.accept_token(token) and compressed.accept_token(token)
    stop = vocab.stop_ids[0]
    assert stop in bits(plain.next_vocab_bitmask(), vocab.vocab_size)
    assert plain.accept_token(stop) and compressed.accept_token(stop)


def test_probe_turns_an_xgrammar_crash_into_an_error(monkeypatch) -> None:
    """xgrammar 0.2.8 can die with SIGSEGV on some grammars: the probe runs it in a child."""
    import cfgzip_lab.engine as engine

    engine.probe_xgrammar('root ::= "a" | "b"\n')  # compiles: no error
    with pytest.raises(engine.GrammarCompileError, match="EBNF parser error at line"):
        engine.probe_xgrammar('root ::= "a" |\n')
    monkeypatch.setattr(engine, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(engine.GrammarCompileError, match="crashed \\(signal 11\\)"):
        engine.probe_xgrammar('root ::= "a"\n')


# -- XGrammar decides some tokens by the company they keep ---------------------------------
LINE_GRAMMAR = 'root ::= "a" [^\\n]+ "\\n"'


def _allows(vocab: list[bytes], token: bytes) -> bool:
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=[])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(LINE_GRAMMAR))
    mask = xgr.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(mask)
    i = vocab.index(token)
    return bool((int(mask[0, i // 32]) >> (i % 32)) & 1)


def test_xgrammar_allows_a_token_once_its_longest_prefix_is_in_the_vocabulary():
    """The workaround's premise: with ``"aa"`` listed, XGrammar allows ``"aa\\n"``; ``"a"``
    alone does not help (what matters is the token sorted right before it)."""
    assert _allows([b"a\n", b"aa", b"aa\n"], b"aa\n")
    assert _allows([b"aa\n"], b"aa\n")
    assert not _allows([b"a", b"a\n", b"aa\n"], b"aa\n")


@pytest.mark.xfail(
    strict=True,
    reason="xgrammar 0.2.8 refuses 'aa\\n' when 'a\\n' is its only neighbour; "
    "if this passes, XGrammar was fixed and shadow_prefixes may no longer be needed",
)
def test_xgrammar_mask_does_not_depend_on_other_tokens():
    assert _allows([b"a\n", b"aa\n"], b"aa\n")


def test_shadow_prefixes_make_the_representatives_prefix_closed():
    """Every samplable token that is a proper prefix of a representative is listed after the
    K classes (sorted, once); stop and special tokens and representatives are not."""
    vocab = vocab_from_bytes(
        [b"a", b"ab", b"abc", b"b", b"bc", b"<s>", b"c", b""], stop_ids=[7], special_ids=[5], name="shadows"
    )
    # classes: {a, b, c} rep "a"; {ab, abc} rep "abc" (not the shortest, to have a prefix);
    # {bc} rep "bc"; the special "<s>" blocked; the stop token.
    class_of = np.array([0, 1, 1, 0, 2, 3, 0, 4], dtype=np.int32)
    classes = TokenClasses(
        class_of,
        np.array([0, 2, 4, 5, 7], dtype=np.int32),
        np.array([NORMAL, NORMAL, NORMAL, BLOCKED, STOP], dtype=np.uint8),
    )
    assert shadow_prefixes(vocab, classes) == [b"ab", b"b"]
    info = compressed_tokenizer_info(vocab, classes)
    assert [bytes(b) for b in info.decoded_vocab] == [b"a", b"abc", b"bc", b"", b"", b"ab", b"b"]
    assert info.vocab_size == 7 and info.stop_token_ids == [4]


@pytest.mark.slow
def test_list_grammar_with_smollm2_allows_two_spaces_and_a_newline_after_a_dash():
    """The case the verifier found: llama.cpp's list.gbnf, SmolLM2, ``"  \\n"`` after ``"-"``."""
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    path = THIRD_PARTY / "llama.cpp" / "list.gbnf"
    if not path.exists():
        pytest.skip("third-party grammars not present")
    vocab = load_vocab("smollm2")
    text = path.read_text(encoding="utf-8")
    classes = build_classes(compile_grammar(text, source=str(path)), vocab).classes
    engines = compile_engines(text, vocab, classes)
    plain, compressed = engines.plain(), engines.compressed()
    dash, target = vocab.token_bytes.index(b"-"), vocab.token_bytes.index(b"  \n")
    assert plain.accept_token(dash) and compressed.accept_token(dash)
    plain_bits, compressed_bits = plain.next_vocab_bitmask(), compressed.next_vocab_bitmask()
    assert unpack_bitmask(plain_bits, vocab.vocab_size)[target]
    assert torch.equal(plain_bits, compressed_bits)
