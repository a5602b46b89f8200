"""Damaged class caches: always a CacheError naming the file (exit status 2 from the CLI),
never a traceback, never classes that load wrong.

The files are damaged the ways files get damaged: cut short at every offset, one byte
flipped at every offset, a few bytes flipped at random places, arrays swapped, reshaped,
retyped or rewritten (with a fresh zip CRC, so only the cache's own sha256 can tell), and
the metadata edited. A load that succeeds must give back exactly the saved classes.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cfgzip_lab.cache.format import FORMAT_VERSION, CacheError, load_classes, read_metadata, save_classes
from cfgzip_lab.classes.classing import ClassKind, TokenClasses
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

GRAMMAR = 'root ::= "(" root ")" | [ab]+\n'


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, TokenClasses]:
    vocab = vocab_from_bytes([b"a", b"b", b"ab", b"(", b")", b"x", b""], stop_ids=[6], name="toy")
    classes = build_classes(compile_grammar(GRAMMAR), vocab).classes
    path = save_classes(classes, tmp_path_factory.mktemp("toy") / "toy.npz", grammar_text=GRAMMAR, vocab=vocab)
    return path, load_classes(path)


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> tuple[Path, TokenClasses]:
    """A valid partition of 20,000 ids into 300 classes (blocked, stop, then normal)."""
    rng = np.random.default_rng(7)
    class_of = rng.integers(0, 300, 20_000).astype(np.int32)
    class_of[:300] = np.arange(300)
    kinds = np.full(300, ClassKind.NORMAL, np.uint8)
    kinds[:2] = (ClassKind.BLOCKED, ClassKind.STOP)
    classes = TokenClasses(class_of, np.arange(300, dtype=np.int32), kinds, {"tokenizer": "synthetic"})
    path = save_classes(classes, tmp_path_factory.mktemp("large") / "large.npz")
    return path, load_classes(path)


def same(a: TokenClasses, b: TokenClasses) -> bool:
    return (
        all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("class_of", "representatives", "class_kind"))
        and a.metadata == b.metadata
    )


def load_or_error(path: Path, original: TokenClasses) -> str:
    """ "error" (a CacheError naming the file) or "same" (the intact classes); fails otherwise."""
    try:
        loaded = load_classes(path)
    except CacheError as exc:
        assert str(path) in str(exc)
        return "error"
    assert same(loaded, original), "a damaged cache loaded as different classes"
    return "same"


def entries(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def write_zip(out: Path, arrays: dict[str, np.ndarray], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """An .npz written entry by entry (zipfile computes every CRC afresh)."""
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=False)
            archive.writestr(f"{name}.npy", buffer.getvalue())
    return out


# -- cut short, bytes flipped ---------------------------------------------------------------------
def test_cut_short_at_every_offset(toy, tmp_path):
    path, original = toy
    data = path.read_bytes()
    bad = tmp_path / "cut.npz"
    for offset in range(len(data)):
        bad.write_bytes(data[:offset])
        assert load_or_error(bad, original) == "error", offset


def test_one_byte_flipped_at_every_offset(toy, tmp_path):
    path, original = toy
    data = path.read_bytes()
    bad = tmp_path / "flip.npz"
    rng = random.Random(1)
    outcomes = {"error": 0, "same": 0}
    for offset in range(len(data)):
        for mask in (0xFF, rng.randrange(1, 255)):
            damaged = bytearray(data)
            damaged[offset] ^= mask
            bad.write_bytes(bytes(damaged))
            outcomes[load_or_error(bad, original)] += 1
    # About a fifth of the bytes of so small a file are zip bookkeeping that readers ignore
    # (file times, attributes, the local headers' copies of sizes): flipping one changes
    # nothing that is read, and the classes load intact. Every other flip is refused.
    assert outcomes["error"] > 0.7 * sum(outcomes.values()), outcomes


@pytest.mark.parametrize("flips", [1, 3, 8])
def test_random_bytes_flipped_in_a_larger_cache(large, tmp_path, flips):
    path, original = large
    data = path.read_bytes()
    bad = tmp_path / "flips.npz"
    rng = random.Random(flips)
    for _ in range(150):
        damaged = bytearray(data)
        for _ in range(flips):
            damaged[rng.randrange(len(damaged))] ^= rng.randrange(1, 256)
        bad.write_bytes(bytes(damaged))
        load_or_error(bad, original)


# -- arrays swapped, reshaped, retyped, rewritten -------------------------------------------------
def _changed(arrays: dict[str, np.ndarray], case: str) -> dict[str, np.ndarray]:
    a = dict(arrays)
    if case == "swapped":
        a["class_of"], a["representatives"] = a["representatives"], a["class_of"]
    elif case == "reshaped":
        a["class_of"] = a["class_of"].reshape(2, -1)
    elif case == "float":
        a["class_of"] = a["class_of"].astype(np.float64)
    elif case == "int64":  # same values, another dtype
        a["class_of"] = a["class_of"].astype(np.int64)
    elif case == "one_token_moved":  # still a valid partition: only the sha256 can tell
        class_of = a["class_of"].copy()
        token = int(np.flatnonzero(~np.isin(np.arange(class_of.size), a["representatives"]))[0])
        class_of[token] = (class_of[token] + 1) % a["representatives"].size
        a["class_of"] = class_of
    elif case == "kinds_edited":
        kinds = a["class_kind"].copy()
        kinds[-1] = ClassKind.STOP if kinds[-1] != ClassKind.STOP else ClassKind.NORMAL
        a["class_kind"] = kinds
    elif case == "extra_array":
        a["extra"] = np.zeros(3, np.int32)
    elif case == "missing_array":
        del a["class_kind"]
    elif case == "object_array":
        a["class_of"] = np.array([None, 1], dtype=object)
    return a


@pytest.mark.parametrize(
    "case",
    [
        "swapped",
        "reshaped",
        "float",
        "int64",
        "one_token_moved",
        "kinds_edited",
        "extra_array",
        "missing_array",
        "object_array",
    ],
)
@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED], ids=["deflated", "stored"])
def test_case__compression__rewritten_arrays_are_refused(large, tmp_path, case, compression):
    path, original = large
    arrays = _changed(entries(path), case) if case != "object_array" else None
    if arrays is None:  # np.load cannot read it back without pickle: write the entries by hand
        arrays = {k: v for k, v in entries(path).items() if k != "class_of"}
        bad = tmp_path / "obj.npz"
        with zipfile.ZipFile(bad, "w", compression) as archive:
            for name, array in arrays.items():
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, array)
                archive.writestr(f"{name}.npy", buffer.getvalue())
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.array([None, 1], dtype=object), allow_pickle=True)
            archive.writestr("class_of.npy", buffer.getvalue())
    else:
        bad = write_zip(tmp_path / f"{case}.npz", arrays, compression)
    with pytest.raises(CacheError) as info:
        load_classes(bad)
    assert str(bad) in str(info.value)
    assert "pickle" not in str(info.value)


@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED], ids=["deflated", "stored"])
def test_a_faithful_rewrite_loads_the_same(large, tmp_path, compression):
    path, original = large
    again = write_zip(tmp_path / "again.npz", entries(path), compression)
    assert same(load_classes(again), original)


def test_a_byte_flipped_inside_a_stored_array_with_a_fresh_crc(large, tmp_path):
    path, original = large
    arrays = entries(path)
    raw = bytearray(arrays["class_of"].tobytes())
    raw[1234] ^= 0x01  # class id of one token, one bit: still a valid partition of ids
    arrays["class_of"] = np.frombuffer(bytes(raw), dtype=arrays["class_of"].dtype)
    bad = write_zip(tmp_path / "bit.npz", arrays, zipfile.ZIP_STORED)
    with pytest.raises(CacheError, match="arrays_sha256"):
        load_classes(bad)


# -- metadata edited ------------------------------------------------------------------------------
def _with_metadata(path: Path, out: Path, raw: bytes) -> Path:
    arrays = entries(path)
    arrays["metadata"] = np.frombuffer(raw, dtype=np.uint8)
    return write_zip(out, arrays)


def test_every_metadata_value_edited_is_refused(toy, tmp_path):
    path, _ = toy
    meta = read_metadata(path)
    for key, value in meta.items():
        edited = dict(meta)
        edited[key] = value + 1 if isinstance(value, (int, float)) and not isinstance(value, bool) else f"{value}x"
        bad = _with_metadata(path, tmp_path / f"{key}.npz", json.dumps(edited, sort_keys=True).encode())
        with pytest.raises(CacheError, match="inconsistent|format version") as info:
            load_classes(bad)
        assert str(bad) in str(info.value), key
    for key in ("metadata_sha256", "arrays_sha256", "format_version"):
        bad = _with_metadata(
            path, tmp_path / f"no_{key}.npz", json.dumps({k: v for k, v in meta.items() if k != key}).encode()
        )
        with pytest.raises(CacheError):
            load_classes(bad)


@pytest.mark.parametrize(
    "raw__error",
    [
        (b"[1, 2]", "not an object"),
        (b"{not json", "unreadable metadata"),
        (b"\xff\xfe{}", "unreadable metadata"),
        (b"", "unreadable metadata"),
    ],
    ids=["list", "not_json", "not_utf8", "empty"],
)
def test_raw__error(toy, tmp_path, raw__error):
    path, _ = toy
    raw, error = raw__error
    with pytest.raises(CacheError, match=error):
        load_classes(_with_metadata(path, tmp_path / "meta.npz", raw))


# -- older formats, the CLI -----------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
def test_older_formats_without_digests_still_load(toy, tmp_path, version):
    path, original = toy
    arrays = entries(path)
    meta = {k: v for k, v in read_metadata(path).items() if k not in ("arrays_sha256", "metadata_sha256")}
    meta["format_version"] = version
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    old = tmp_path / f"v{version}.npz"
    np.savez_compressed(old, **arrays)
    loaded = load_classes(old)
    assert np.array_equal(loaded.class_of, original.class_of) and loaded.metadata["format_version"] == version
    assert FORMAT_VERSION == 4


def test_cli_inspect_exits_2_naming_the_file(large, tmp_path, capsys):
    from cfgzip_lab.cli import main

    path, original = large
    data = path.read_bytes()
    rng = random.Random(3)
    for i in range(40):
        damaged = bytearray(data)
        for _ in range(3):
            damaged[rng.randrange(len(damaged))] ^= rng.randrange(1, 256)
        bad = tmp_path / f"bad{i}.npz"
        bad.write_bytes(bytes(damaged))
        status = main(["inspect", str(bad)])
        err = capsys.readouterr().err
        assert status in (0, 2)
        if status == 2:
            assert f"cfgzip-lab inspect: class cache {bad}" in err
    bad = tmp_path / "cut.npz"
    bad.write_bytes(data[: len(data) // 3])
    proc = subprocess.run([sys.executable, "-m", "cfgzip_lab.cli", "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and str(bad) in proc.stderr


def test_a_full_cache_flipped_at_random_is_refused_or_intact(tmp_path):
    """Format 4 with everything (grammar text, GNF, σ_in index): a damaged file gives a CacheError
    from load_cache, or every part back unchanged; never a traceback from the GNF or index readers."""
    from cfgzip_lab.cache.format import load_cache
    from cfgzip_lab.cache.index import index_from_contents
    from cfgzip_lab.native import build_index

    vocab = vocab_from_bytes([b"a", b"b", b"ab", b"(", b")", b"((", b"x", b""], stop_ids=[7], name="toy")
    compiled = compile_grammar(GRAMMAR)
    result = build_classes(compiled, vocab)
    index = build_index(compiled.gnf, result.classes, vocab.token_bytes, token_node=result.token_node)
    path = save_classes(result.classes, tmp_path / "full.npz", vocab=vocab, native_index=index, compiled=compiled)
    intact = load_cache(path, vocab=vocab)
    data = path.read_bytes()
    bad = tmp_path / "bad.npz"
    rng = random.Random(4)
    outcomes = {"error": 0, "same": 0}
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 3])):
            damaged[rng.randrange(len(damaged))] ^= rng.randrange(1, 256)
        bad.write_bytes(bytes(damaged))
        try:
            got = load_cache(bad, vocab=vocab)
        except CacheError as exc:
            assert str(bad) in str(exc)
            outcomes["error"] += 1
            continue
        assert same(got.classes, intact.classes) and got.grammar.text == GRAMMAR
        assert got.grammar.gnf.names == compiled.gnf.names and got.grammar.gnf.atom_of == compiled.gnf.atom_of
        assert index_from_contents(got, got.grammar.gnf).children == index.children
        outcomes["same"] += 1
    assert outcomes["error"] > 200, outcomes
