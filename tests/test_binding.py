"""The one loader of the compiled core (``cfgzip_lab/_binding.py``): the switch, the ABI check."""

from __future__ import annotations

import importlib

import pytest
from paths import REPO

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


def test_the_extension_sits_at_the_package_root_beside_its_stub():
    """``cfgzip_lab._native`` (csrc/), its API in ``_native.pyi``: what ``pyproject.toml`` builds."""
    import tomllib

    assert _binding.EXTENSION == "cfgzip_lab._native"
    assert (REPO / "cfgzip_lab" / "_native.pyi").is_file()
    (ext,) = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]
    assert ext["name"] == _binding.EXTENSION
    assert sorted(ext["sources"]) == sorted(f"csrc/{p.name}" for p in (REPO / "csrc").glob("*.c"))
    assert sorted(ext["depends"]) == sorted(f"csrc/{p.name}" for p in (REPO / "csrc").glob("*.h"))


def test_a_stale_build_of_the_old_layout_is_no_module(tmp_path):
    """A ``native/_kernel*.so`` left in a developer's tree (before csrc/) is neither imported by the
    loader nor counted by the import graph, which counts an extension only beside its stub."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
    import_graph = sys.modules.setdefault("import_graph", importlib.util.module_from_spec(spec))
    if not hasattr(import_graph, "discover_modules"):  # dataclasses look their module up by name
        spec.loader.exec_module(import_graph)
    package = tmp_path / "cfgzip_lab"
    (package / "native").mkdir(parents=True)
    for name in ("__init__.py", "_binding.py", "_native.pyi", "_native.cpython-311-x86_64-linux-gnu.so"):
        (package / name).write_text("")
    (package / "native" / "__init__.py").write_text("")
    (package / "native" / "_kernel.cpython-311-x86_64-linux-gnu.so").write_text("")
    modules = import_graph.discover_modules(package)
    assert "cfgzip_lab._native" in modules
    assert "cfgzip_lab.native._kernel" not in modules
    assert not _binding.EXTENSION.startswith("cfgzip_lab.native.")
