"""The package's optional compiled kernel (``_kernel.c``), or None.

None where the package was built without a C compiler, or with ``CFGZIP_NATIVE_KERNEL=0`` in
the environment (the Python, numpy and XGrammar paths then run: the references the kernel is
tested against). One place decides, for the native engine's walk and rows and for masking
logits on the CPU (:func:`cfgzip_lab.expand.apply_vocab_bitmask_inplace`).
"""

from __future__ import annotations

import os

try:  # absent when the package was built without a C compiler
    from . import _kernel as compiled
except ImportError:  # pragma: no cover - depends on the build
    compiled = None
if os.environ.get("CFGZIP_NATIVE_KERNEL", "1") == "0":
    compiled = None

__all__ = ["compiled"]
