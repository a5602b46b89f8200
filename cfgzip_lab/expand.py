"""Class bitmask → vocabulary bitmask / logits mask: one gather by ``class_of``.

The compressed engine fills a bitmask over the K classes in XGrammar's packed format
(int32 words, bit ``j`` of word ``w`` is class ``32 * w + j``). Every token is allowed
exactly when its class is, so expanding is one gather::

    allowed[t] = class_bit[class_of[t]]

:class:`Expander` builds the index data once per :class:`TokenClasses` (and once per
device) and turns a class bitmask of shape ``(W_K,)`` or ``(B, W_K)`` into

- a packed vocabulary bitmask in XGrammar's int32 format, ``(…, ceil(V / 32))``, that any
  engine applying XGrammar bitmasks (vLLM, SGLang, ``xgrammar.apply_token_bitmask_inplace``)
  takes unchanged — bits past ``V`` in the last word are 0;
- an additive logits bias (0 where allowed, ``-inf`` elsewhere), or
- in-place masking of a logits tensor of shape ``(…, V)`` on its own device.

The work itself is done by one of the backends in :mod:`cfgzip_lab.kernels` (one file
each, chosen by the device of the input through a dispatch table):

- ``numpy`` on the CPU: a plain gather costs 40–65 µs for 128k tokens on one core, so the
  vocabulary is split into a few large classes served from 16-row union tables and many
  small ones scattered (12 µs for JSON's 324 classes, 27 µs for C-like's 4,001), with a
  bounded memo of rows seen before;
- ``triton`` on CUDA: one launch for the whole batch (packed mask, or logits masked in
  place), CUDA-graph capturable;
- ``torch`` anywhere else, and as the reference for the Triton kernel: about ten device
  ops per call, launch-bound on a GPU (104–334 µs measured on an H200).

All backends give the same bits (tested against each other and a naive reference).

torch is imported only where a tensor is made or given (a tensor given means torch is loaded
already): the native engine reaches this module through :mod:`cfgzip_lab.native.rows`, and
``import cfgzip_lab.native`` or ``cfgzip-lab compress`` then never pay for torch (measured on
this 2-core machine: importing torch costs 0.75-1.7 s and 150 MB).
"""

from __future__ import annotations

import math
import sys
from functools import cache
from typing import TYPE_CHECKING, Literal

import numpy as np

from .classes.classing import TokenClasses
from .kernels import backend_for
from .kernels.cpu import LARGE_CLASS_TOKENS, MAX_LARGE_CLASSES, CpuExpansion
from .kernels.tables import ExpansionTables

if TYPE_CHECKING:
    import torch

    from .kernels.torch import TorchExpansion

__all__ = [
    "Expander",
    "apply_vocab_bitmask_inplace",
    "pack_bool_mask",
    "unpack_bitmask",
    "LARGE_CLASS_TOKENS",
    "MAX_LARGE_CLASSES",
]

if sys.byteorder != "little":  # pragma: no cover - every platform XGrammar ships for
    raise ImportError("cfgzip_lab.expand assumes a little-endian machine (XGrammar does too)")


def _is_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch (none exists before it is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def unpack_bitmask(bitmask: np.ndarray | torch.Tensor, size: int) -> np.ndarray:
    """Packed int32 bitmask ``(…, W)`` → bool array ``(…, size)`` (numpy, on CPU).

    >>> unpack_bitmask(np.array([0b101], dtype=np.int32), 3).tolist()
    [True, False, True]
    """
    if _is_tensor(bitmask):
        bitmask = bitmask.detach().cpu().numpy()
    words = np.ascontiguousarray(bitmask, dtype=np.int32)
    bits = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")
    return bits[..., :size].view(bool)


def pack_bool_mask(allowed: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Bool array ``(…, V)`` → packed int32 tensor ``(…, ceil(V / 32))`` (CPU), XGrammar's format."""
    import torch

    if isinstance(allowed, torch.Tensor):
        allowed = allowed.detach().cpu().numpy()
    allowed = np.asarray(allowed, dtype=bool)
    size = allowed.shape[-1]
    words = math.ceil(size / 32)
    padded = np.zeros(allowed.shape[:-1] + (words * 32,), dtype=bool)
    padded[..., :size] = allowed
    packed = np.packbits(padded, axis=-1, bitorder="little")
    return torch.from_numpy(np.ascontiguousarray(packed).view(np.int32))


def apply_vocab_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``xgrammar.apply_token_bitmask_inplace`` with a backend that works in this environment.

    On the CPU the compiled kernel masks instead where it is built (same bits, see
    :func:`_mask_logits_compiled`). XGrammar's ``auto`` backend picks Triton on CUDA; the lab
    installs XGrammar without Triton, so CUDA falls back to XGrammar's torch-native kernel
    when Triton is missing.
    The bitmask is moved to the logits' device first, and a single row (shape ``(W,)`` or
    ``(1, W)``) is broadcast over a batch of logits (XGrammar's kernel does not broadcast).
    """
    import xgrammar as xgr

    bitmask = bitmask.to(logits.device, non_blocking=True)
    if _mask_logits_compiled(logits, bitmask, vocab_size):
        return logits
    if logits.dim() == 2 and logits.shape[0] > 1 and (bitmask.dim() == 1 or bitmask.shape[0] == 1):
        bitmask = bitmask.reshape(1, -1).expand(logits.shape[0], -1).contiguous()
    if logits.device.type == "cpu":
        backend = "cpu"
    elif logits.device.type == "cuda":
        try:
            import triton  # noqa: F401

            backend = "triton"
        except ImportError:
            backend = "torch_native"
    else:
        backend = "torch_native"
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size, backend=backend)
    return logits


@cache
def _neg_inf_bits() -> dict:
    """The bit pattern of -inf in each dtype the compiled kernel masks (XGrammar's CPU kernel takes the
    same three), and the integer dtype of that width the kernel writes through."""
    import torch

    return {
        torch.float32: (0xFF800000, torch.int32),
        torch.bfloat16: (0xFF80, torch.int16),
        torch.float16: (0xFC00, torch.int16),
    }


def _compiled_masking(logits: torch.Tensor):
    """The compiled kernel if it can mask these logits (built; CPU; fp32/bf16/fp16; 1 or 2 dims), else None."""
    from ._binding import kernel as compiled

    if (
        compiled is None
        or logits.dtype not in _neg_inf_bits()
        or logits.device.type != "cpu"
        or logits.dim() not in (1, 2)
    ):
        return None
    return compiled


def _mask_logits_compiled(logits: torch.Tensor, bitmask: torch.Tensor | np.ndarray, vocab_size: int) -> bool:
    """Mask CPU logits with the compiled kernel (``csrc/logits.c``, ``mask_logits``); False (nothing
    done) where it is not built or the call is not its case (another dtype, a bitmask that is neither
    one row nor one per logits row): XGrammar's CPU kernel, the reference it is tested against, then
    runs and says what is wrong. Same bits as XGrammar's on contiguous logits, and right on any
    layout (XGrammar's ignores an element stride); 14-19 µs for one Llama-3 row of a real mask where
    XGrammar's takes 270 µs (README, "Native engine")."""
    compiled = _compiled_masking(logits)
    if compiled is None:
        return False
    bits = bitmask.numpy() if _is_tensor(bitmask) else bitmask  # a CPU tensor here
    if bits.dtype != np.int32 or bits.ndim not in (1, 2):
        return False
    rows = logits.shape[0] if logits.dim() == 2 else 1
    bitmask_rows = bits.shape[0] if bits.ndim == 2 else 1
    if bitmask_rows not in (1, rows):
        return False
    neg_inf, as_int = _neg_inf_bits()[logits.dtype]
    target = logits if logits.is_contiguous() else logits.contiguous()
    words = bits.shape[-1]
    compiled.mask_logits(
        np.ascontiguousarray(bits),
        words if bitmask_rows > 1 else 0,
        target.view(as_int).numpy(),
        rows,
        logits.shape[-1],
        logits.element_size(),
        vocab_size,
        neg_inf,
    )
    if target is not logits:
        # Written back through numpy, not ``copy_``: logits made under ``torch.inference_mode``
        # refuse in-place torch ops outside it, and XGrammar's kernel writes them in place too.
        np.copyto(logits.view(as_int).numpy(), target.view(as_int).numpy())
    return True


class Expander:
    """Expands class bitmasks to vocabulary masks for one :class:`TokenClasses`.

    Parameters
    ----------
    classes : TokenClasses
        The partition; ``class_of`` has one entry per logits position (padding included).
    backend : {"auto", "numpy", "torch", "triton"}
        ``auto``: numpy for CPU tensors, the Triton kernel on CUDA (torch ops when Triton
        is missing), torch ops on other devices. ``torch`` forces the device code path
        (also on CPU: how tests cover it without a GPU); ``numpy`` goes through the CPU for
        every device; ``triton`` falls back to torch off CUDA. Triton does the packed mask
        and in-place masking; ``to_allowed`` and ``to_logits_bias`` use torch ops there.
    memo_bytes : int
        Bound on each memo of expanded rows (packed, bool, bias) of the numpy backend,
        least recently used out.
    large_class_tokens : int
        Size from which a class goes into the numpy backend's union tables (see
        :mod:`cfgzip_lab.kernels.cpu`); any value gives the same bits, only the speed changes.
    class_ids_checked : bool
        The caller checks that every ``class_of`` id is a class (raising ``ClassesError`` as
        :meth:`~cfgzip_lab.classes.classing.TokenClasses.validate` does) before any expansion:
        :class:`~cfgzip_lab.native.rows.RowCache`'s compiled tables, in their one pass over it.

    Examples
    --------
    >>> ex = Expander(classes)                       # doctest: +SKIP
    >>> vocab_bits = ex.to_vocab_bitmask(class_bits) # (…, ceil(V/32)) int32, same device
    >>> ex.mask_logits_(logits, class_bits)          # -inf where the class is not allowed
    """

    def __init__(
        self,
        classes: TokenClasses,
        *,
        backend: Literal["auto", "numpy", "torch", "triton"] = "auto",
        memo_bytes: int = 32 << 20,
        large_class_tokens: int = LARGE_CLASS_TOKENS,
        class_ids_checked: bool = False,
    ) -> None:
        if backend not in ("auto", "numpy", "torch", "triton"):
            raise ValueError(f"unknown backend {backend!r}")
        self.backend = backend
        # ids outside [0, K) would read past the tables' rows; class_ids_checked: the caller checks them
        # in its own pass over class_of (the native engine's compiled rows, built right after)
        classes.validate(representatives=False, class_ids=not class_ids_checked)
        self.vocab_size = classes.vocab_size
        self.num_classes = int(classes.num_classes)
        if classes.sparse_map() is not None:  # the map made when a numpy or torch backend first needs it
            self.tables = ExpansionTables.build(lambda: classes.class_of, self.num_classes, self.vocab_size)
        else:
            self.tables = ExpansionTables.build(np.asarray(classes.class_of), self.num_classes)
        self.class_bitmask_size = self.tables.class_bitmask_size
        self.vocab_bitmask_size = self.tables.vocab_bitmask_size
        self._cpu_options = {"memo_bytes": memo_bytes, "large_class_tokens": large_class_tokens}
        self._cpu: CpuExpansion | None = None
        self._torch: TorchExpansion | None = None
        self._triton = None

    @property
    def cpu(self) -> CpuExpansion:
        """The numpy backend (:class:`cfgzip_lab.kernels.cpu.CpuExpansion`), built on first use: the
        native engine's compiled rows never need it (c_like with Llama-3: 7 ms of union tables)."""
        if self._cpu is None:
            self._cpu = CpuExpansion(self.tables, **self._cpu_options)
        return self._cpu

    @property
    def torch(self) -> TorchExpansion:
        """The torch backend (:class:`cfgzip_lab.kernels.torch.TorchExpansion`), built on first use."""
        if self._torch is None:
            from .kernels.torch import TorchExpansion

            self._torch = TorchExpansion(self.tables)
        return self._torch

    @property
    def triton(self):
        """The Triton backend (:class:`cfgzip_lab.kernels.triton.TritonExpansion`), built on first use."""
        if self._triton is None:
            from .kernels.triton import TritonExpansion

            self._triton = TritonExpansion(self.tables)
        return self._triton

    def backend_on(self, device: torch.device | str) -> str:
        """Which backend this expander uses for tensors on ``device`` (``numpy``, ``torch``, ``triton``)."""
        import torch

        return backend_for(self.backend, torch.device(device))

    def clear_memo(self) -> None:
        """Forget the numpy backend's memoised rows (benchmarks time cold expansion this way)."""
        self.cpu.row_memo.clear()

    def _check(self, class_bitmask: torch.Tensor | np.ndarray) -> None:
        if class_bitmask.shape[-1] != self.class_bitmask_size:
            raise ValueError(
                f"class bitmask has {class_bitmask.shape[-1]} words, expected "
                f"{self.class_bitmask_size} for {self.num_classes} classes"
            )

    @staticmethod
    def _as_tensor(class_bitmask: torch.Tensor | np.ndarray) -> torch.Tensor:
        import torch

        if isinstance(class_bitmask, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(class_bitmask, dtype=np.int32))
        return class_bitmask

    # -- public API -------------------------------------------------------------------
    def to_vocab_bitmask(
        self, class_bitmask: torch.Tensor | np.ndarray, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Packed class bitmask ``(…, W_K)`` → packed vocabulary bitmask ``(…, ceil(V/32))``.

        int32, XGrammar's format, on the device of the input (numpy input → CPU tensor).
        Bits past ``V`` in the last word are 0. ``out``: where to write (same shape, int32,
        same device); with the Triton backend that makes the call allocation-free, hence
        CUDA-graph capturable.
        """
        import torch

        self._check(class_bitmask)
        class_bitmask = self._as_tensor(class_bitmask)
        backend = self.backend_on(class_bitmask.device)
        if backend == "triton":
            return self.triton.to_vocab_bitmask(class_bitmask, out=out)
        if backend == "numpy":
            packed = self.cpu.to_vocab_bitmask(class_bitmask.cpu().numpy())
            result = torch.from_numpy(packed).to(class_bitmask.device)
        else:
            result = self.torch.to_vocab_bitmask(class_bitmask)
        if out is None:
            return result
        out.copy_(result)
        return out

    def to_allowed(self, class_bitmask: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Class bitmask ``(…, W_K)`` → bool tensor ``(…, V)``, True where the token is allowed."""
        import torch

        self._check(class_bitmask)
        class_bitmask = self._as_tensor(class_bitmask)
        if self.backend_on(class_bitmask.device) == "numpy":
            return torch.from_numpy(self.cpu.to_allowed(class_bitmask.cpu().numpy())).to(class_bitmask.device)
        return self.torch.to_allowed(class_bitmask)

    def to_logits_bias(
        self,
        class_bitmask: torch.Tensor | np.ndarray,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Class bitmask → additive bias ``(…, V)``: 0 where allowed, ``-inf`` elsewhere.

        ``dtype`` default float32. Computed on ``device`` (default: the class bitmask's device).
        """
        import torch

        dtype = torch.float32 if dtype is None else dtype
        self._check(class_bitmask)
        class_bitmask = self._as_tensor(class_bitmask)
        device = torch.device(device) if device is not None else class_bitmask.device
        if self.backend_on(device) == "numpy":
            # A copy: the memo's rows are read-only and shared.
            bias = torch.from_numpy(np.array(self.cpu.to_logits_bias(class_bitmask.cpu().numpy())))
            return bias.to(device=device, dtype=dtype)
        return self.torch.to_logits_bias(class_bitmask.to(device, non_blocking=True), dtype)

    def mask_logits_(self, logits: torch.Tensor, class_bitmask: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Mask ``logits`` ``(…, V)`` in place on their own device: ``-inf`` where not allowed.

        The class bitmask (tiny: K bits a row; one row may serve a whole batch) is moved to
        the logits' device. Every backend writes ``-inf`` where not allowed and leaves the rest,
        as XGrammar's kernel does; on the CPU the compiled kernel writes it from the memoised
        vocabulary rows. Without the kernel (or for float64 logits, or more than two dims) the
        numpy backend adds a ``-inf`` bias, then writes ``-inf`` where that made a NaN (a
        ``+inf`` or NaN logit at a refused token). Returns ``logits``.
        """
        if logits.shape[-1] != self.vocab_size:
            raise ValueError(f"logits have {logits.shape[-1]} columns, expected {self.vocab_size}")
        self._check(class_bitmask)
        class_bitmask = self._as_tensor(class_bitmask)
        backend = self.backend_on(logits.device)
        if backend == "numpy" and logits.device.type == "cpu":
            class_rows = class_bitmask.cpu().numpy()
            if _compiled_masking(logits) is not None and class_rows.ndim <= 2:
                single = class_rows.ndim == 1 or class_rows.shape[0] == 1
                rows = self.cpu.vocab_row(class_rows.reshape(-1)) if single else self.cpu.to_vocab_bitmask(class_rows)
                if _mask_logits_compiled(logits, rows, self.vocab_size):
                    return logits
            return self.cpu.mask_logits_(logits, class_rows)
        class_bitmask = class_bitmask.to(logits.device, non_blocking=True)
        if backend == "triton" and _unit_stride_rows(logits, self.vocab_size):
            return self.triton.mask_logits_(logits, class_bitmask)
        return self.torch.mask_logits_(logits, class_bitmask)


def _unit_stride_rows(logits: torch.Tensor, vocab_size: int) -> bool:
    """Whether ``logits`` views as ``(rows, V)`` rows of unit stride (what the kernel writes)."""
    if logits.dim() == 0 or logits.stride(-1) != 1:
        return False
    if logits.dim() == 1:
        return True
    rows = logits.reshape(-1, vocab_size)
    return (
        rows.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
        and rows.data_ptr() == logits.data_ptr()
    )
