"""Class caches round-trip exactly and refuse what they were not built for."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cfgzip_lab.classes.cache import FORMAT_VERSION, CacheError, load_classes, save_classes
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

GRAMMAR = 'root ::= "(" root ")" | [ab]+\n'
OTHER = "root ::= [ab]+\n"


@pytest.fixture()
def built(tmp_path):
    vocab = vocab_from_bytes([b"a", b"b", b"ab", b"(", b")", b"x", b""], stop_ids=[6], name="toy")
    classes = build_classes(compile_grammar(GRAMMAR), vocab).classes
    path = save_classes(classes, tmp_path / "toy.npz", grammar_text=GRAMMAR, vocab=vocab)
    return vocab, classes, path


def test_round_trip(built) -> None:
    vocab, classes, path = built
    loaded = load_classes(path, grammar_text=GRAMMAR, vocab=vocab)
    assert np.array_equal(loaded.class_of, classes.class_of)
    assert np.array_equal(loaded.representatives, classes.representatives)
    assert np.array_equal(loaded.class_kind, classes.class_kind)
    meta = loaded.metadata
    assert meta["format_version"] == FORMAT_VERSION and meta["tokenizer"] == "toy"
    assert meta["vocab_fingerprint"] == vocab.fingerprint and len(meta["grammar_sha256"]) == 64
    with np.load(path, allow_pickle=False) as data:  # nothing in it needs pickle
        assert set(data.files) == {"class_of", "representatives", "class_kind", "metadata"}


def test_other_grammar_is_refused(built) -> None:
    vocab, _, path = built
    with pytest.raises(CacheError, match="another grammar"):
        load_classes(path, grammar_text=OTHER, vocab=vocab)


def test_other_vocabulary_is_refused(built) -> None:
    _, _, path = built
    other = vocab_from_bytes([b"a", b"b", b"ab", b"(", b")", b"y", b""], stop_ids=[6], name="toy2")
    with pytest.raises(CacheError, match="another vocabulary.*toy2"):
        load_classes(path, grammar_text=GRAMMAR, vocab=other)


def test_truncated_file_is_refused(built, tmp_path) -> None:
    _, _, path = built
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CacheError, match="truncated"):
        load_classes(cut)


def test_missing_file_and_not_a_cache(tmp_path) -> None:
    with pytest.raises(CacheError, match="does not exist"):
        load_classes(tmp_path / "nope.npz")
    junk = tmp_path / "junk.npz"
    junk.write_text("hello")
    with pytest.raises(CacheError, match="not an .npz archive") as info:
        load_classes(junk)
    assert "pickle" not in str(info.value)  # never suggest loading a shared file unsafely


def rewrite(path: Path, out: Path, **changes) -> Path:
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(arrays["metadata"].tobytes())
    meta.update(changes.pop("meta", {}))
    arrays.update(changes)
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(out, **arrays)
    return out


def test_newer_format_is_refused(built, tmp_path) -> None:
    _, _, path = built
    newer = rewrite(path, tmp_path / "newer.npz", meta={"format_version": FORMAT_VERSION + 1})
    with pytest.raises(CacheError, match="format version"):
        load_classes(newer)


def test_inconsistent_arrays_are_refused(built, tmp_path) -> None:
    _, classes, path = built
    bad = rewrite(path, tmp_path / "bad.npz", class_of=np.full(classes.vocab_size, 99, dtype=np.int32))
    with pytest.raises(CacheError, match="inconsistent"):
        load_classes(bad)
    assert zipfile.is_zipfile(bad)
