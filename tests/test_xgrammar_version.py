"""The installed XGrammar's version: parsed, checked against the tested range, warned about once,
and carried by every cache so that classes made under one release are never served under another."""

from __future__ import annotations

import json
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import tomllib
from packaging.requirements import Requirement

from cfgzip_lab import xgrammar_version
from cfgzip_lab.cache.directory import code_version
from cfgzip_lab.cache.format import CacheError, _metadata_sha256, load_classes, save_classes
from cfgzip_lab.pipeline import build_classes, compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

GRAMMAR = 'root ::= "(" root ")" | [ab]+\n'


@pytest.mark.parametrize(
    "text, numbers",
    [("0.2.8", (0, 2, 8)), ("0.2.9", (0, 2, 9)), ("0.2.10rc1", (0, 2, 10)), ("0.3.0.dev2+g12ab", (0, 3, 0))],
)
def test_parse(text, numbers) -> None:
    assert xgrammar_version.parse(text) == numbers


def test_parse_refuses_what_is_no_version() -> None:
    with pytest.raises(ValueError, match="not a version"):
        xgrammar_version.parse("latest")


def test_installed_is_the_distribution_and_in_the_tested_range() -> None:
    assert xgrammar_version.installed() == metadata.version("xgrammar")
    # CI runs this file under every supported release (scripts/test.sh): each must be one of them.
    assert xgrammar_version.is_supported(), xgrammar_version.installed()
    assert xgrammar_version.at_least("0.2.8") and not xgrammar_version.at_least("99.0")


@pytest.mark.parametrize(
    "version, supported", [("0.2.8", True), ("0.2.9+cu128", True), ("0.2.7", False), ("0.3.0", False)]
)
def test_is_supported(version, supported) -> None:
    assert xgrammar_version.is_supported(version) is supported


def test_an_untested_release_warns_once(monkeypatch) -> None:
    monkeypatch.setattr(xgrammar_version, "installed", lambda: "0.3.1")
    monkeypatch.setattr(xgrammar_version, "_warned", False)
    with pytest.warns(
        xgrammar_version.XGrammarVersionWarning, match=r"tested against XGrammar 0\.2\.8, 0\.2\.9.*0\.3\.1.*verify"
    ):
        xgrammar_version.warn_if_unsupported()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xgrammar_version.warn_if_unsupported()  # once per process


def test_a_tested_release_does_not_warn(monkeypatch) -> None:
    monkeypatch.setattr(xgrammar_version, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xgrammar_version.warn_if_unsupported()


def test_the_cache_directory_key_carries_the_release() -> None:
    assert code_version().endswith(f"+xgrammar{xgrammar_version.installed()}")


def _saved(tmp_path):
    vocab = vocab_from_bytes([b"a", b"b", b"ab", b"(", b")", b"x", b""], stop_ids=[6], name="toy")
    classes = build_classes(compile_grammar(GRAMMAR), vocab).classes
    return vocab, save_classes(classes, tmp_path / "toy.npz", grammar_text=GRAMMAR, vocab=vocab)


def _with_metadata(path, out, change) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(arrays["metadata"].tobytes())
    change(meta)
    meta["metadata_sha256"] = _metadata_sha256(meta)
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(out, **arrays)


def test_a_class_cache_records_the_release_and_is_refused_under_another(tmp_path) -> None:
    vocab, path = _saved(tmp_path)
    assert (
        load_classes(path, grammar_text=GRAMMAR, vocab=vocab).metadata["xgrammar_version"]
        == xgrammar_version.installed()
    )
    other = tmp_path / "other.npz"
    _with_metadata(path, other, lambda meta: meta.update(xgrammar_version="0.1.99"))
    with pytest.raises(
        CacheError, match=rf"built under XGrammar 0\.1\.99 and the installed XGrammar is {xgrammar_version.installed()}"
    ):
        load_classes(other, grammar_text=GRAMMAR, vocab=vocab)


def test_a_cache_from_before_the_release_was_recorded_is_taken_as_0_2_8(tmp_path, monkeypatch) -> None:
    vocab, path = _saved(tmp_path)
    old = tmp_path / "old.npz"
    _with_metadata(path, old, lambda meta: meta.pop("xgrammar_version"))
    monkeypatch.setattr(xgrammar_version, "installed_tuple", lambda: (0, 2, 8))
    assert load_classes(old, grammar_text=GRAMMAR, vocab=vocab).vocab_size == vocab.vocab_size
    monkeypatch.setattr(xgrammar_version, "installed_tuple", lambda: (0, 2, 9))
    monkeypatch.setattr(xgrammar_version, "installed", lambda: "0.2.9")
    with pytest.raises(CacheError, match=r"built under XGrammar 0\.2\.8 and the installed XGrammar is 0\.2\.9"):
        load_classes(old, grammar_text=GRAMMAR, vocab=vocab)


def test_the_package_requirement_admits_every_supported_release_and_pins_none() -> None:
    """``pip install cfgzip-lab`` beside a server's XGrammar must neither downgrade nor fail to resolve it."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    found = [Requirement(r) for r in pyproject["project"]["dependencies"] if Requirement(r).name == "xgrammar"]
    assert len(found) == 1, found
    spec = found[0].specifier
    assert all(spec.contains(v) for v in xgrammar_version.SUPPORTED), (spec, xgrammar_version.SUPPORTED)
    assert not any(s.operator in ("==", "===") for s in spec), spec
