"""TokenClasses' own checks: validate() (a partition with representatives) and check_fits()
(built for this grammar and vocabulary), from a table of known-bad classes."""

from __future__ import annotations

import numpy as np
import pytest

from cfgzip_lab import xgrammar_version
from cfgzip_lab.classes.classing import BLOCKED, NORMAL, STOP, ClassesError, TokenClasses, grammar_sha256
from cfgzip_lab.vocab import vocab_from_bytes

GRAMMAR = 'root ::= "a" | "b"\n'


def good() -> TokenClasses:
    # 6 tokens: class 0 blocked {0}, class 1 stop {1}, class 2 {2, 4}, class 3 {3, 5}
    return TokenClasses(
        np.array([0, 1, 2, 3, 2, 3], np.int32),
        np.array([0, 1, 2, 3], np.int32),
        np.array([BLOCKED, STOP, NORMAL, NORMAL], np.uint8),
        {"vocab_size": 6, "classes": 4},
    )


def with_(**changes) -> TokenClasses:
    c = good()
    for name, value in changes.items():
        setattr(c, name, value)
    return c


@pytest.mark.parametrize(
    "classes__vocab_size__error",
    [
        (with_(class_of=np.array([[0, 1, 2, 3, 2, 3]])), None, "one-dimensional integer"),
        (with_(class_of=np.array([0.0, 1, 2, 3, 2, 3])), None, "one-dimensional integer"),
        (good(), 7, "cover 6 ids but the vocabulary has 7"),
        (with_(class_kind=np.array([BLOCKED, STOP, NORMAL], np.uint8)), None, "3 entries for 4 classes"),
        (with_(class_of=np.array([0, 1, 2, 4, 2, 3], np.int32)), None, r"outside \[0, 4\)"),
        (with_(class_of=np.array([0, 1, 2, -1, 2, 3], np.int32)), None, r"outside \[0, 4\)"),
        (with_(class_kind=np.array([BLOCKED, STOP, NORMAL, 7], np.uint8)), None, "other than NORMAL"),
        (with_(representatives=np.array([0, 1, 3, 2], np.int32)), None, "member of class"),
        (with_(representatives=np.array([0, 1, 2, 9], np.int32)), None, "member of class"),
        (with_(metadata={"vocab_size": 5}), None, "metadata says vocab_size 5"),
        (with_(metadata={"classes": 3}), None, "metadata says classes 3"),
    ],
    ids=[
        "2d",
        "float",
        "size",
        "kinds_short",
        "id_high",
        "id_negative",
        "kind_value",
        "rep_swapped",
        "rep_outside",
        "meta_vocab",
        "meta_classes",
    ],
)
def test_classes__vocab_size__error(classes__vocab_size__error):
    classes, vocab_size, error = classes__vocab_size__error
    with pytest.raises(ClassesError, match=error):
        classes.validate(vocab_size)


def test_a_good_partition_passes_and_its_digest_follows_the_arrays():
    good().validate(6)
    assert good().digest() == good().digest()
    assert with_(class_of=np.array([0, 1, 2, 3, 3, 2], np.int32)).digest() != good().digest()


def test_check_fits_names_what_differs():
    vocab = vocab_from_bytes([b"<s>", b"</s>", b"a", b"b", b"aa", b"bb"], name="toy", stop_ids=[1])
    other = vocab_from_bytes([b"<s>", b"</s>", b"a", b"b", b"aa", b"cc"], name="toy2", stop_ids=[1])
    classes = good()
    classes.check_fits(GRAMMAR, vocab)  # no fingerprints: nothing to compare
    with pytest.raises(ClassesError, match="which grammar"):
        classes.check_fits(GRAMMAR, vocab, strict=True)
    classes.metadata.update(
        grammar_sha256=grammar_sha256(GRAMMAR), vocab_fingerprint=vocab.fingerprint, tokenizer="toy"
    )
    # a cache file that names no release is from 0.2.8, the only release before it was recorded
    if xgrammar_version.installed_tuple() == (0, 2, 8):
        classes.check_fits(GRAMMAR, vocab, strict=True)
    else:
        with pytest.raises(ClassesError, match="built under XGrammar 0.2.8"):
            classes.check_fits(GRAMMAR, vocab, strict=True)
    classes.metadata["xgrammar_version"] = "0.1.0"
    with pytest.raises(ClassesError, match="built under XGrammar 0.1.0"):
        classes.check_fits(GRAMMAR, vocab)
    classes.metadata["xgrammar_version"] = xgrammar_version.installed()
    classes.check_fits(GRAMMAR, vocab, strict=True)
    with pytest.raises(ClassesError, match="another grammar"):
        classes.check_fits('root ::= "c"', vocab)
    with pytest.raises(ClassesError, match="another vocabulary.*toy2"):
        classes.check_fits(GRAMMAR, other)


def test_kind_values_are_the_stored_ones():
    """Caches and vocabulary tables store kinds as uint8: the values never change."""
    from cfgzip_lab.classes import classing
    from cfgzip_lab.vocab import KIND_NAMES, TokenKind

    assert {k.name: int(k) for k in TokenKind} == {"NORMAL": 0, "STOP": 1, "SPECIAL": 2, "PADDING": 3}
    assert {k.name: int(k) for k in classing.ClassKind} == {"NORMAL": 0, "STOP": 1, "BLOCKED": 2}
    assert KIND_NAMES == ("normal", "stop", "special", "padding")
    assert (classing.NORMAL, classing.STOP, classing.BLOCKED) == (0, 1, 2)
    assert type(classing.BLOCKED) is int  # plain ints for per-element numpy code


def sparse(ids=(1, 2, 3, 4, 5), classes=(1, 2, 3, 2, 3), reps=(0, 1, 2, 3), ids_dtype=np.int32) -> TokenClasses:
    """good() as a sparse map: the ids outside class 0 and their classes."""
    return TokenClasses.from_sparse(
        6,
        np.array(ids, ids_dtype),
        np.array(classes, np.int32),
        np.array(reps, np.int32),
        np.array([BLOCKED, STOP, NORMAL, NORMAL], np.uint8),
        {"vocab_size": 6, "classes": 4},
    )


def test_a_sparse_map_is_the_dense_one_made_when_first_read():
    """from_sparse: the same partition as its dense twin, checked without making the map; class_of is made
    (read-only) on first read, and the sparse map is given up once that array is made writable."""
    classes = sparse()
    classes.validate(6)
    assert classes.vocab_size == 6 and classes.num_classes == 4 and "class_of" not in classes.__dict__
    assert classes.sparse_map() is not None
    assert np.array_equal(classes.class_of, good().class_of) and not classes.class_of.flags.writeable
    assert classes.digest() == good().digest() and classes.sparse_map() is not None
    import pickle

    again = pickle.loads(pickle.dumps(sparse()))
    assert np.array_equal(again.class_of, good().class_of)
    classes.class_of.flags.writeable = True
    assert classes.sparse_map() is None  # a map that may be written is no longer the sparse one's
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        getattr(sparse(), "nothing")  # noqa: B009 - the attribute read is the test


@pytest.mark.parametrize(
    "classes__error",
    [
        (sparse(ids=(1, 3, 2, 4, 5)), "ascending ids"),
        (sparse(ids=(1, 3, 2, 4, 5), ids_dtype=np.uint32), "ascending ids"),  # (3 - 2 wraps round unsigned)
        (sparse(ids=(1, 2, 3, 4, 6)), "ascending ids"),
        (sparse(ids=(1, 2, 3, 4)), "ascending ids"),  # one class short of one id each
        (sparse(classes=(1, 2, 4, 2, 3)), r"outside \[0, 4\)"),
        (sparse(reps=(0, 1, 2, 4)), "representatives"),  # 4 is in class 2
        (sparse(reps=(0, 1, 2, 6)), "representatives"),  # past the vocabulary
        (sparse(reps=(-1, 1, 2, 3)), "representatives"),  # before it
        (sparse(reps=(1, 1, 2, 3)), "representatives"),
    ],
)
def test_a_bad_sparse_map_is_refused_without_being_made(classes__error):
    classes, error = classes__error
    with pytest.raises(ClassesError, match=error):
        classes.validate()
    assert "class_of" not in classes.__dict__
