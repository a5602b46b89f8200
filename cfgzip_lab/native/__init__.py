"""The native displacement engine: next-token masks from the classes' displacements, no XGrammar.

``index`` (the σ_in trie), ``walk`` (the state DAG and its memos), ``rows`` (class set →
packed vocabulary row), ``matcher`` (the Engine interface, single and batch), ``engine``
(what the requests of one grammar share), ``_kernel.c`` (optional, compiled by ``pip install``:
the trie walk of a state and the expansion of a class set in C; the Python paths are the
reference and the fallback, ``CFGZIP_NATIVE_KERNEL=0`` keeps them). README.md, "Native engine",
says how it works and what was measured.
"""

from .engine import NativeEngine, build_native_engine
from .index import IndexTooLarge, NativeIndexError, SigmaInIndex, build_index
from .matcher import DisplacementBatchMatcher, DisplacementMatcher, NativeBatchMatcher, NativeMatcher
from .walk import StateBudgetExceeded, WalkLimits

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
