"""The one loader of the compiled core (``cfgzip_lab/_binding.py``): the switch, the ABI check."""

from __future__ import annotations

import importlib

import pytest

from cfgzip_lab import _binding


def _extension_built() -> bool:
    try:
        importlib.import_module(_binding.EXTENSION)
    except ImportError:
        return False
    return True


needs_extension = pytest.mark.skipif(not _extension_built(), reason="the compiled kernel is not built here")


def test_native_kernel_0_selects_the_python_paths():
    assert _binding.load({"CFGZIP_NATIVE_KERNEL": "0"}) is None


@needs_extension
def test_a_built_extension_states_the_abi_these_modules_expect():
    kernel = _binding.load({})
    assert kernel is not None
    assert kernel.ABI_VERSION == _binding.ABI_VERSION


@needs_extension
def test_an_extension_of_another_abi_is_not_used(monkeypatch):
    monkeypatch.setattr(_binding, "ABI_VERSION", _binding.ABI_VERSION + 1)
    with pytest.warns(RuntimeWarning, match="stale build"):
        assert _binding.load({}) is None
