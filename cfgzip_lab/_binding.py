"""The compiled core, loaded once: :data:`kernel` is the extension module, or None.

One handle for the whole package, as XGrammar's ``load_binding.py`` is: the word store and GNF
passes (``grammar``), the displacer and classing walk (``classes``), the vocabulary trie, the σ_in
build and the mask engine's walk and expansion ask this module, and nothing else, whether C runs.

None where

- the package was built without a C compiler (the extension is not there);
- ``CFGZIP_NATIVE_KERNEL=0`` is in the environment: the Python, numpy and XGrammar paths run,
  the references the compiled core is tested against (node for node, ``tests/test_compiled.py``);
- the extension was built from other sources than these modules expect: its ``ABI_VERSION`` is not
  :data:`ABI_VERSION` (a stale build; rebuild with ``pip install -e .``). A warning says so.

The extension states everything it offers at one version, so callers never probe for a function
(``hasattr``): a kernel of this ABI has all of them.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

__all__ = ["ABI_VERSION", "EXTENSION", "kernel", "load"]

EXTENSION = "cfgzip_lab._native"
"""The extension's import name (the one line to change when it moves)."""

ABI_VERSION = 5
"""The extension's ``ABI_VERSION`` these Python modules are written against: raise both together
when a compiled function is added, removed or changes its arguments."""


def load(environ: dict[str, str] | None = None) -> ModuleType | None:
    """Import the extension and check its ABI; None where the Python paths must run instead."""
    environ = os.environ if environ is None else environ
    if environ.get("CFGZIP_NATIVE_KERNEL", "1") == "0":
        return None
    try:
        module = importlib.import_module(EXTENSION)
    except ModuleNotFoundError as exc:  # not built; any other import error is a bug, raised
        if exc.name != EXTENSION:
            raise
        return None
    found = getattr(module, "ABI_VERSION", None)
    if found != ABI_VERSION:
        warnings.warn(
            f"{EXTENSION} has ABI_VERSION {found}, this package expects {ABI_VERSION}: a stale build, "
            "the Python paths run instead (rebuild with `pip install -e .`)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return module


kernel: ModuleType | None = load()
