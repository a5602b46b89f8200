"""Expansion in one Triton launch for the whole batch: packed vocabulary bitmask, or logits masked in place.

Each program takes a block of tokens, loads their classes from the device-resident
``class_of`` table (int32, 512 KB for Llama-3's 128,256 tokens) once, and then, for each
row of its row group, gathers the class words (a K-bit row: a few hundred bytes, served
from L1/L2) and either packs 32 token bits per vocabulary word or writes ``-inf`` into
the disallowed logits. One launch replaces the torch backend's ten or so (unpack,
``index_select``, repack, tail mask), which is what made expansion on CUDA launch-bound:
104–334 µs for the packed mask at batch 1 on an H200, against 18–38 µs on one CPU core.

Bytes moved per call: the class_of table once per row group plus the output (16 KB per
row packed, ``2 * V`` bytes per bf16 row written only where disallowed), microseconds of
HBM time, so the floor is the launch itself. Measured on an H200 (Llama-3 vocabulary,
4,001 classes, CUDA events, median of 500): replayed from a CUDA graph 10 µs at batch 1 and
14 µs (packed) / 25 µs (in-place bf16) at batch 64; launched eagerly 31–51 µs, of which
Triton's Python dispatch is 22–37 µs of host time (:meth:`TritonExpansion.bind` skips it).

CUDA-graph capturable: no host synchronisation, no allocation when ``out`` is given, all
inputs already on the device (copy a CPU class mask into a static device buffer first).
``triton`` is imported on first use only: it ships with CUDA builds of torch, not CPU ones.
Setting ``TRITON_INTERPRET=1`` runs the same kernels on CPU tensors (how the tests check
them on a machine without a GPU, when Triton is installed).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .tables import ExpansionTables

__all__ = ["TritonExpansion", "available"]

BLOCK_WORDS = 32
"""Vocabulary words per program for the packed mask (1,024 tokens)."""
BLOCK_TOKENS = 1024
"""Tokens per program when masking logits."""
ROWS_PER_PROGRAM = 8
"""Rows of a batch one program handles, reusing the class ids it loaded."""


@functools.cache
def available() -> bool:
    """Whether ``triton`` can be imported (CUDA builds of torch ship it); asked once."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _kernels() -> dict[str, Any]:
    """Compile-on-first-use kernels; a function so that importing this module needs no Triton."""
    import triton
    import triton.language as tl

    @triton.jit
    def vocab_bitmask_kernel(
        class_mask_ptr,
        class_row_stride,
        class_of_ptr,
        out_ptr,
        out_row_stride,
        vocab_size,
        vocab_words,
        tail_word_mask,
        n_rows,
        ROWS: tl.constexpr,
        BLOCK_WORDS: tl.constexpr,
    ):
        words = tl.program_id(0) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
        lanes = tl.arange(0, 32)
        tokens = words[:, None] * 32 + lanes[None, :]
        valid = tokens < vocab_size
        cls = tl.load(class_of_ptr + tokens, mask=valid, other=0)
        word_of = cls >> 5
        shift = cls & 31
        keep = tl.where(words == vocab_words - 1, tail_word_mask, -1)
        for i in range(ROWS):
            row = tl.program_id(1) * ROWS + i
            # A row past the batch gets empty bounds rather than a scalar `&`-ed into the
            # block masks (Triton's interpreter promotes that `&` to int32 and refuses it).
            live = row < n_rows
            row_tokens = tl.where(live, vocab_size, 0)
            row_words = tl.where(live, vocab_words, 0)
            class_words = tl.load(class_mask_ptr + row * class_row_stride + word_of, mask=tokens < row_tokens, other=0)
            bits = (class_words >> shift) & 1
            # Distinct powers of two: their sum is their OR, and bit 31 lands on int32's sign.
            packed = tl.sum(bits << lanes[None, :], axis=1) & keep
            tl.store(out_ptr + row * out_row_stride + words, packed, mask=words < row_words)

    @triton.jit
    def mask_logits_kernel(
        logits_ptr,
        logits_row_stride,
        class_mask_ptr,
        class_row_stride,
        class_of_ptr,
        vocab_size,
        n_rows,
        ROWS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        tokens = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        valid = tokens < vocab_size
        cls = tl.load(class_of_ptr + tokens, mask=valid, other=0)
        word_of = cls >> 5
        shift = cls & 31
        neg_inf = tl.full([BLOCK], float("-inf"), tl.float32).to(logits_ptr.dtype.element_ty)
        for i in range(ROWS):
            row = tl.program_id(1) * ROWS + i
            live = tokens < tl.where(row < n_rows, vocab_size, 0)
            class_words = tl.load(class_mask_ptr + row * class_row_stride + word_of, mask=live, other=-1)
            refused = ((class_words >> shift) & 1) == 0
            # Only the disallowed entries are written: the logits are never read.
            tl.store(logits_ptr + row.to(tl.int64) * logits_row_stride + tokens, neg_inf, mask=live & refused)

    return {"vocab_bitmask": vocab_bitmask_kernel, "mask_logits": mask_logits_kernel}


def _rows_of(class_bitmask: torch.Tensor, n_rows: int, words: int) -> tuple[torch.Tensor, int]:
    """``class_bitmask`` as a ``(rows, words)`` int32 view and its row stride (0: one row broadcast)."""
    cm = class_bitmask if class_bitmask.dtype == torch.int32 else class_bitmask.to(torch.int32)
    cm = cm.reshape(-1, cm.shape[-1])
    if cm.stride(-1) != 1:
        cm = cm.contiguous()
    if cm.shape[0] == 1 and n_rows > 1:
        return cm, 0
    if cm.shape[0] != n_rows:
        raise ValueError(f"{cm.shape[0]} class-mask rows for {n_rows} rows")
    return cm, cm.stride(0)


class TritonExpansion:
    """The Triton backend of :class:`~cfgzip_lab.expand.Expander` (CUDA tensors; any device interpreted)."""

    name = "triton"

    def __init__(self, tables: ExpansionTables) -> None:
        self.t = tables
        self._class_of: dict[torch.device, torch.Tensor] = {}
        self._lock = threading.Lock()

    def class_of(self, device: torch.device) -> torch.Tensor:
        """The int32 token → class table on ``device``, uploaded once."""
        table = self._class_of.get(device)
        if table is None:
            with self._lock:
                table = self._class_of.get(device)
                if table is None:
                    table = torch.from_numpy(self.t.class_of.astype(np.int32)).to(device)
                    self._class_of[device] = table
        return table

    def _vocab_bitmask_launch(self, class_bitmask: torch.Tensor, out: torch.Tensor | None):
        t = self.t
        lead = class_bitmask.shape[:-1]
        n_rows = math.prod(lead) if lead else 1
        cm, cm_stride = _rows_of(class_bitmask, n_rows, t.class_bitmask_size)
        if out is None:
            out = torch.empty(lead + (t.vocab_bitmask_size,), dtype=torch.int32, device=class_bitmask.device)
        out2 = out.view(-1, t.vocab_bitmask_size)
        grid = (triton_cdiv(t.vocab_bitmask_size, BLOCK_WORDS), triton_cdiv(n_rows, ROWS_PER_PROGRAM))
        args = (
            cm,
            cm_stride,
            self.class_of(cm.device),
            out2,
            out2.stride(0),
            t.vocab_size,
            t.vocab_bitmask_size,
            t.tail_word_mask,
            n_rows,
            ROWS_PER_PROGRAM,
            BLOCK_WORDS,
        )
        return "vocab_bitmask", grid, args, out

    def _mask_logits_launch(self, logits: torch.Tensor, class_bitmask: torch.Tensor):
        t = self.t
        rows = logits.reshape(-1, t.vocab_size)
        if rows.stride(-1) != 1 or rows.data_ptr() != logits.data_ptr() or not _is_view(rows, logits):
            raise ValueError("Triton masking needs logits that view as (rows, V) rows of unit stride")
        n_rows = rows.shape[0]
        cm, cm_stride = _rows_of(class_bitmask, n_rows, t.class_bitmask_size)
        grid = (triton_cdiv(t.vocab_size, BLOCK_TOKENS), triton_cdiv(n_rows, ROWS_PER_PROGRAM))
        args = (
            rows,
            rows.stride(0),
            cm,
            cm_stride,
            self.class_of(cm.device),
            t.vocab_size,
            n_rows,
            ROWS_PER_PROGRAM,
            BLOCK_TOKENS,
        )
        return "mask_logits", grid, args, logits

    @staticmethod
    def _launch(name: str, grid, args):
        """One launch through Triton's JIT (specialises on the arguments, compiles once); returns the compiled kernel."""
        *values, rows, block = args
        if name == "vocab_bitmask":
            return _kernels()[name][grid](*values, ROWS=rows, BLOCK_WORDS=block)
        return _kernels()[name][grid](*values, ROWS=rows, BLOCK=block)

    def to_vocab_bitmask(self, class_bitmask: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Packed class mask ``(…, W_K)`` on the device → packed vocabulary mask ``(…, W_V)``.

        ``out`` (int32, contiguous rows, same device) makes the call allocation-free.
        """
        name, grid, args, out = self._vocab_bitmask_launch(class_bitmask, out)
        self._launch(name, grid, args)
        return out

    def mask_logits_(self, logits: torch.Tensor, class_bitmask: torch.Tensor) -> torch.Tensor:
        """``-inf`` where not allowed, in place; one class row may serve every logits row."""
        name, grid, args, logits = self._mask_logits_launch(logits, class_bitmask)
        self._launch(name, grid, args)
        return logits

    def bind(self, op: str, *tensors: torch.Tensor) -> Callable[[], None]:
        """A zero-argument launcher of ``op`` on fixed device buffers: bind once, launch many.

        ``bind("to_vocab_bitmask", class_mask, out)`` or ``bind("mask_logits_", logits,
        class_mask)``: the kernel is compiled (and run once) for exactly these tensors, and
        each call then launches the compiled kernel directly, skipping Triton's per-call
        argument specialisation and cache lookup (most of the eager launch cost). For a
        serving engine's persistent buffers, like a CUDA graph but without capture; the
        buffers' contents may change between calls, their shapes and addresses may not.
        """
        if op == "to_vocab_bitmask":
            name, grid, args, _ = self._vocab_bitmask_launch(*tensors)
            class_arg, class_tensor = args[0], tensors[0]
        elif op == "mask_logits_":
            name, grid, args, _ = self._mask_logits_launch(*tensors)
            class_arg, class_tensor = args[2], tensors[1]
        else:
            raise ValueError(f"unknown op {op!r}")
        if class_arg.data_ptr() != class_tensor.data_ptr():  # a converted copy would go stale
            raise ValueError("bind needs an int32 class mask with unit-stride rows")
        # CompiledKernel's runner reads grid[2]: it needs all three grid dimensions (the first
        # try on an H200 passed two and failed with an IndexError; this form is not yet re-run there).
        compiled = self._launch(name, grid, args)
        if compiled is None:  # TRITON_INTERPRET=1 compiles nothing: each call is interpreted again
            return lambda: self._launch(name, grid, args)
        runner = compiled[(grid[0], grid[1], 1)]
        return lambda: runner(*args)


def _is_view(rows: torch.Tensor, logits: torch.Tensor) -> bool:
    return rows.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
