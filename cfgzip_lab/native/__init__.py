"""The native displacement engine: next-token masks from the classes' displacements, no XGrammar.

``index`` (the σ_in trie), ``walk`` (the state DAG and its memos), ``rows`` (class set →
packed vocabulary row), ``matcher`` (the Engine interface, single and batch), ``engine``
(what the requests of one grammar share), ``csrc/`` (optional, compiled by ``pip install``:
the trie walk of a state and the expansion of a class set in C; the Python paths are the
reference and the fallback, ``CFGZIP_NATIVE_KERNEL=0`` keeps them). README.md, "Native engine",
says how it works and what was measured.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from .engine import NativeEngine, build_native_engine
    from .index import IndexTooLarge, NativeIndexError, SigmaInIndex, build_index
    from .matcher import DisplacementBatchMatcher, DisplacementMatcher, NativeBatchMatcher, NativeMatcher
    from .walk import StateBudgetExceeded, WalkLimits

# name → submodule that defines it: importing the package loads none of the engine (a grammar's
# build, which only needs the compiled core, never pays for it)
_API = {
    "NativeEngine": ".engine",
    "build_native_engine": ".engine",
    "SigmaInIndex": ".index",
    "IndexTooLarge": ".index",
    "NativeIndexError": ".index",
    "build_index": ".index",
    "DisplacementMatcher": ".matcher",
    "DisplacementBatchMatcher": ".matcher",
    "NativeMatcher": ".matcher",
    "NativeBatchMatcher": ".matcher",
    "StateBudgetExceeded": ".walk",
    "WalkLimits": ".walk",
}

__all__ = [
    "NativeEngine",
    "build_native_engine",
    "SigmaInIndex",
    "IndexTooLarge",
    "NativeIndexError",
    "build_index",
    "DisplacementMatcher",
    "DisplacementBatchMatcher",
    "NativeMatcher",
    "NativeBatchMatcher",
    "StateBudgetExceeded",
    "WalkLimits",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
