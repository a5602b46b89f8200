"""The lossless verifier: passes on lossless partitions, catches wrong ones, deterministic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from paths import BUNDLED_DIR
from reference_tools import JSON_BUILTIN_GRAMMAR as JSON_GRAMMAR
from toy_vocab import ARITH_TOKENS, SPECIAL_ID, STOP_ID

from cfgzip_lab.classes.classing import BLOCKED, NORMAL, STOP, TokenClasses
from cfgzip_lab.verify import (
    VerifyReport,
    duplicate_classes,
    identity_classes,
    verify_engines,
    verify_lossless,
)
from cfgzip_lab.vocab import vocab_from_bytes

ARITH = (
    'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
    'factor ::= [0-9]+ | "(" expr ")"\n'
)

TOY_TOKENS = ARITH_TOKENS


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOY_TOKENS, stop_ids=[STOP_ID], special_ids=[SPECIAL_ID], vocab_size=33, name="toy")


def merged(classes: TokenClasses, vocab, a: int, b: int, *, rep: int | None = None) -> TokenClasses:
    """Move token ``b`` into the class of token ``a`` (a deliberately wrong partition
    when the grammar can tell them apart); classes are renumbered, representatives
    recomputed (byte-wise shortest, ties to the lowest id) unless ``rep`` is given."""
    class_of = classes.class_of.copy()
    class_of[b] = class_of[a]
    used, class_of = np.unique(class_of, return_inverse=True)
    class_of = class_of.astype(np.int32)
    kinds = classes.class_kind[used]
    reps = np.array(
        [min(np.flatnonzero(class_of == k), key=lambda t: (len(vocab.token_bytes[t]), t)) for k in range(used.size)],
        dtype=np.int32,
    )
    if rep is not None:
        reps[class_of[rep]] = rep
    return TokenClasses(class_of, reps, kinds.astype(np.uint8))


def run(grammar, vocab, classes, **kw) -> VerifyReport:
    kw = {"walks": 30, "steps": 40, "seed": 0, **kw}
    return verify_lossless(grammar, vocab, classes, **kw)


@pytest.mark.parametrize("make", [identity_classes, duplicate_classes])
@pytest.mark.parametrize("grammar", [JSON_GRAMMAR, ARITH], ids=["json", "arith"])
def test_lossless_partitions_pass(toy, make, grammar):
    report = run(grammar, toy, make(toy), docs=['{"a": [10, true, null]}', "(12+1)*0"])
    assert report.ok and report.mismatches == 0 and report.first_mismatch is None
    assert report.steps_checked > 300
    assert report.rollbacks > 0 and report.rejections_checked > 0 and report.stops_reached > 0
    assert report.docs == 2 and len(report.docs_rejected) == 1  # each doc fits one grammar


# grammar__merge__wrong_partitions: pairs of tokens the grammar can tell apart.
WRONG = [
    (JSON_GRAMMAR, (0, 8)),  # "{" with "a": visible at the very first mask
    (JSON_GRAMMAR, (12, 13)),  # "1" with "0": only "0" forbids digits after it
    (ARITH, (20, 25)),  # ")" with "0)"
    (ARITH, (20, 21)),  # ")" with "+"
    (ARITH, (24, 25)),  # "10" with "0)"
]


@pytest.mark.parametrize("grammar, pair", WRONG)
def test_wrong_partitions_fail(toy, grammar, pair):
    report = run(grammar, toy, merged(duplicate_classes(toy), toy, *pair))
    assert not report.ok and report.mismatches >= 1
    first = report.first_mismatch
    assert first["check"] in {"mask", "accept", "terminated", "reject"}
    assert isinstance(first["prefix"], str) and isinstance(first["prefix_ids"], list)
    assert toy.decode(first["prefix_ids"]).decode("utf-8", "replace") == first["prefix"]


def test_first_mismatch_names_the_tokens(toy):
    report = run(JSON_GRAMMAR, toy, merged(duplicate_classes(toy), toy, 0, 8), walks=1)
    first = report.first_mismatch
    assert first["walk"] == "walk 0" and first["step"] == 0 and first["check"] == "mask"
    assert first["prefix"] == ""
    assert [t["id"] for t in first["compressed_only"]] == [8]  # "a" allowed with "{"
    assert first["compressed_only"][0]["bytes"] == "a" and first["plain_only"] == []
    assert first["differing_bits"] == 1


def test_document_replay_alone_catches_a_wrong_partition(toy):
    wrong = merged(duplicate_classes(toy), toy, 12, 13)
    report = run(JSON_GRAMMAR, toy, wrong, walks=0, docs=["[0]"])
    assert not report.ok and report.first_mismatch["walk"] == "doc 0"
    assert run(JSON_GRAMMAR, toy, duplicate_classes(toy), walks=0, docs=["[0]"]).ok


def test_stop_bits_are_compared(toy):
    # The stop id moved into the BLOCKED class: the compressed engine never allows it.
    classes = duplicate_classes(toy)
    class_of = classes.class_of.copy()
    class_of[STOP_ID] = 0
    kinds = classes.class_kind.copy()
    kinds[1] = NORMAL  # the emptied STOP class keeps a representative that no longer maps back
    stopless = merged(TokenClasses(class_of, classes.representatives, kinds), toy, 0, 0)
    assert STOP not in stopless.class_kind
    report = run(ARITH, toy, stopless)
    assert not report.ok
    first = report.first_mismatch
    assert first["check"] == "mask" and [t["id"] for t in first["plain_only"]] == [STOP_ID]


def test_language_equal_tokens_may_share_a_class(toy):
    # In ARITH every binary operator can stand between any two factors: "+" and "*" are
    # one class for the language (not for the parse), and so are "12" and "10".
    classes = merged(merged(duplicate_classes(toy), toy, 21, 22), toy, 23, 24)
    assert run(ARITH, toy, classes).ok


def test_special_token_in_a_normal_class_is_caught(toy):
    # Representative "+": the compressed engine allows the special id wherever "+" goes.
    report = run(ARITH, toy, merged(duplicate_classes(toy), toy, 21, SPECIAL_ID, rep=21))
    assert not report.ok
    assert [t["id"] for t in report.first_mismatch["compressed_only"]] == [SPECIAL_ID]
    # Representative the (empty) special id: XGrammar blanks the class, "+" is lost.
    report = run(ARITH, toy, merged(duplicate_classes(toy), toy, 21, SPECIAL_ID))
    assert not report.ok
    assert [t["id"] for t in report.first_mismatch["plain_only"]] == [21]


def test_deterministic_for_a_seed(toy):
    classes = merged(duplicate_classes(toy), toy, 20, 21)
    a = run(ARITH, toy, classes, seed=7)
    b = run(ARITH, toy, classes, seed=7)
    assert replace(a, seconds=0) == replace(b, seconds=0)
    c = run(ARITH, toy, duplicate_classes(toy), seed=7)
    d = run(ARITH, toy, duplicate_classes(toy), seed=8)
    assert c.steps_checked != d.steps_checked or c.rollbacks != d.rollbacks


def test_reference_partitions(toy):
    ident, dup = identity_classes(toy), duplicate_classes(toy)
    normal = int((toy.kinds == 0).sum())
    assert ident.num_classes == normal + 2  # + BLOCKED + STOP
    assert dup.num_classes == ident.num_classes - 1  # "a" appears twice
    for classes in (ident, dup):
        assert classes.class_kind[0] == BLOCKED and classes.class_kind[1] == STOP
        assert classes.class_of[STOP_ID] == 1 and classes.class_of[SPECIAL_ID] == 0
        assert (classes.class_of[classes.representatives] == np.arange(classes.num_classes)).all()


def test_report_serialises(toy):
    report = run(ARITH, toy, merged(duplicate_classes(toy), toy, 20, 21), walks=3)
    import json

    data = json.loads(json.dumps(report.to_dict()))
    assert data["mismatches"] == report.mismatches and data["first_mismatch"]["check"]


# -- real vocabularies ---------------------------------------------------------------------
def _load(name: str):
    from cfgzip_lab.vocab_sources import load_vocab

    try:
        return load_vocab(name)
    except Exception as err:
        pytest.skip(f"{name} vocabulary unavailable: {err}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama3", "qwen3", "smollm2"])
def test_real_vocabulary_json(name):
    vocab = _load(name)
    docs = ['{"name": "cfgzip", "tags": ["a", 1.5e3, null], "nested": {"ok": true}}', "[1, 2, 3]"]
    report = verify_lossless(JSON_GRAMMAR, vocab, duplicate_classes(vocab), walks=8, steps=48, seed=0, docs=docs)
    assert report.ok, report.first_mismatch
    assert report.docs_rejected == []
    # "{" merged with "[": caught on the first mask
    wrong = merged(duplicate_classes(vocab), vocab, vocab.encode("{")[0], vocab.encode("a")[0])
    bad = verify_lossless(JSON_GRAMMAR, vocab, wrong, walks=2, steps=8, seed=0)
    assert not bad.ok and bad.first_mismatch["step"] == 0


def test_document_replay_can_be_capped(toy):
    full = run(JSON_GRAMMAR, toy, duplicate_classes(toy), walks=0, docs=['{"a": [10, true]}'])
    capped = run(JSON_GRAMMAR, toy, duplicate_classes(toy), walks=0, docs=['{"a": [10, true]}'], max_doc_tokens=3)
    assert full.ok and capped.ok
    assert capped.steps_checked == 4 < full.steps_checked  # 3 tokens: 4 states
    assert capped.docs_rejected == []


# -- displacement classing, end to end -----------------------------------------------------
def _displacement_classes(grammar: str, vocab):
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    return build_classes(compile_grammar(grammar), vocab).classes


@pytest.mark.parametrize("grammar", [JSON_GRAMMAR, ARITH], ids=["json", "arith"])
def test_displacement_classes_pass_on_the_toy_vocabulary(toy, grammar):
    classes = _displacement_classes(grammar, toy)
    assert classes.num_classes < duplicate_classes(toy).num_classes  # it did merge something
    report = run(grammar, toy, classes, walks=40, docs=['{"a": [10, true, null]}', "(12+1)*0"])
    assert report.ok, report.first_mismatch


@pytest.mark.slow
@pytest.mark.parametrize("grammar_name", ["json", "arithmetic_left_recursive"])
def test_displacement_classes_pass_with_llama3(grammar_name):
    vocab = _load("llama3")
    path = BUNDLED_DIR / f"{grammar_name}.ebnf"
    if not path.exists():
        pytest.skip(f"{path} missing")
    grammar = path.read_text()
    classes = _displacement_classes(grammar, vocab)
    samples = sorted((BUNDLED_DIR / "samples" / grammar_name).glob("*"))
    docs = [p.read_text() for p in samples[:2]]
    report = verify_lossless(grammar, vocab, classes, walks=3, steps=16, seed=0, docs=docs, max_doc_tokens=24)
    assert report.ok, report.first_mismatch


def test_progress_and_cancel_stop_between_steps(toy):
    """The workbench's Verify: progress after each walk, cancel polled before each step; a
    cancelled check returns what it checked, saying so."""
    from cfgzip_lab.engine import compile_engines

    engines = compile_engines(JSON_GRAMMAR, toy, identity_classes(toy))
    seen: list[tuple[int, int]] = []
    report = verify_engines(engines, walks=6, steps=16, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(w, 6) for w in range(1, 7)] and not report.cancelled and report.ok
    report = verify_engines(
        engines, walks=6, steps=16, cancel=lambda: len(seen) >= 8, progress=lambda d, t: seen.append((d, t))
    )
    assert report.cancelled and report.walks == 2 and report.in_words(6)[0].startswith("Cancelled after 2 of 6 walks")
