"""Masking CPU logits with the compiled kernel (``csrc/logits.c``, ``mask_logits``), bit for bit
against XGrammar's own CPU ``apply_token_bitmask_inplace``, the reference every engine used before.

Compared as raw bits (NaN and ±inf logits included, so "left alone" means the same bits), over the
dtypes XGrammar's kernel takes, batches with a row each or one broadcast row, vocabularies narrower
than the logits, bitmasks narrower than the vocabulary, and logits in other layouts.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xgrammar as xgr

from cfgzip_lab._binding import kernel as compiled
from cfgzip_lab.expand import _mask_logits_compiled, apply_vocab_bitmask_inplace

needs_kernel = pytest.mark.skipif(compiled is None, reason="the compiled kernel is not built here")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]  # what XGrammar's CPU kernel takes
INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INTS[t.element_size()])


def _logits(rng, shape, dtype) -> torch.Tensor:
    x = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    flat = x.view(-1)
    flat[rng.integers(0, flat.numel(), max(1, flat.numel() // 50))] = float("nan")
    flat[rng.integers(0, flat.numel(), max(1, flat.numel() // 50))] = float("inf")
    return x


def _masks(rng, rows: int, words: int):
    """Scattered bits, whole words, a run of refusals, everything allowed, nothing allowed."""
    scattered = rng.integers(-(2**31), 2**31, (rows, words), dtype=np.int64).astype(np.int32)
    blocky = np.where(rng.random((rows, words)) < 0.5, -1, 0).astype(np.int32)
    sparse = np.full((rows, words), -1, np.int32)
    sparse[:, :: max(1, words // 7)] &= ~np.int32(1 << 3)
    for m in (scattered, blocky, sparse, np.full((rows, words), -1, np.int32), np.zeros((rows, words), np.int32)):
        yield torch.from_numpy(m)


def _xgrammar(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    out = logits.clone()
    if out.dim() == 2 and bitmask.shape[0] == 1 and out.shape[0] > 1:
        bitmask = bitmask.expand(out.shape[0], -1).contiguous()
    xgr.apply_token_bitmask_inplace(out, bitmask, vocab_size=vocab_size, backend="cpu")
    return out


# batch__width__vocab__bitmask_words__bitmask_rows
CASES = [
    (1, 128_256, 128_256, 4_008, 1),  # Llama-3
    (3, 1_000, 1_000, 32, 3),
    (4, 1_000, 1_000, 32, 1),  # one row for the whole batch
    (2, 1_037, 1_000, 33, 2),  # logits wider than the vocabulary (padding): the rest untouched
    (2, 1_000, 1_000, 31, 2),  # a bitmask covering 992 tokens: the last 8 untouched
    (1, 33, 33, 2, 1),
    (1, 31, 31, 1, 1),
]


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch, width, vocab, words, bitmask_rows", CASES)
def test_compiled_masking_equals_xgrammar_bit_for_bit(dtype, batch, width, vocab, words, bitmask_rows):
    rng = np.random.default_rng(width + batch)
    logits = _logits(rng, (batch, width), dtype)
    for bitmask in _masks(rng, bitmask_rows, words):
        expected = _xgrammar(logits, bitmask, min(vocab, 32 * words))
        got = logits.clone()
        assert _mask_logits_compiled(got, bitmask, vocab)  # the kernel ran, not the fallback
        assert torch.equal(_bits(got), _bits(expected))


@needs_kernel
def test_one_dimensional_logits_and_the_public_entry_point():
    rng = np.random.default_rng(1)
    logits = _logits(rng, (5_000,), torch.float32)
    bitmask = torch.from_numpy(rng.integers(-(2**31), 2**31, 157, dtype=np.int64).astype(np.int32))
    expected = _xgrammar(logits.reshape(1, -1), bitmask.reshape(1, -1), 5_000).reshape(-1)
    got = logits.clone()
    assert apply_vocab_bitmask_inplace(got, bitmask, 5_000) is got
    assert torch.equal(_bits(got), _bits(expected))


# name -> logits of shape (3, 640) in another layout
LAYOUTS = {
    "last position of (B, T, V)": lambda x: torch.stack([x, x.clone()], dim=1)[:, -1, :],  # row stride 2V
    "column-major": lambda x: x.t().contiguous().t(),
}


@needs_kernel
@pytest.mark.parametrize("layout", LAYOUTS)
def test_logits_in_other_layouts_are_masked_exactly(layout):
    """The kernel masks a contiguous copy and copies it back: the bits of masking a contiguous
    tensor, in place (XGrammar's own kernel gets the column-major case wrong)."""
    rng = np.random.default_rng(2)
    base = _logits(rng, (3, 640), torch.float32)
    logits = LAYOUTS[layout](base)
    assert not logits.is_contiguous() and torch.equal(_bits(logits.contiguous()), _bits(base))
    bitmask = torch.from_numpy(rng.integers(-(2**31), 2**31, (3, 20), dtype=np.int64).astype(np.int32))
    expected = _xgrammar(base, bitmask, 640)
    assert apply_vocab_bitmask_inplace(logits, bitmask, 640) is logits
    assert torch.equal(_bits(logits.contiguous()), _bits(expected))


def test_what_the_kernel_does_not_take_goes_to_xgrammar_unchanged():
    """float64 logits: XGrammar's kernel refuses them, as it did before the compiled path existed."""
    logits = torch.zeros(1, 64, dtype=torch.float64)
    assert not _mask_logits_compiled(logits, torch.zeros(1, 2, dtype=torch.int32), 64)
    with pytest.raises(ValueError, match="float32"):
        apply_vocab_bitmask_inplace(logits, torch.zeros(1, 2, dtype=torch.int32), 64)


@needs_kernel
def test_the_kernel_refuses_sizes_that_do_not_fit():
    logits = np.zeros(64, np.int32)
    with pytest.raises(ValueError, match="do not fit"):
        compiled.mask_logits(np.zeros(2, np.int32), 0, logits, 1, 65, 4, 64, 0xFF800000)  # 65 > 64 elements
    with pytest.raises(ValueError, match="do not fit"):
        compiled.mask_logits(np.zeros(2, np.int32), 2, logits, 2, 32, 4, 32, 0xFF800000)  # 2 rows, 1 bitmask row
    with pytest.raises(ValueError, match="do not fit"):
        compiled.mask_logits(np.zeros(2, np.int32), 0, logits, 1, 32, 8, 64, 0)  # 8-byte elements


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch, class_rows", [(1, 1), (4, 4), (4, 1)])
def test_the_compressed_engines_cpu_masking_writes_what_xgrammar_writes(dtype, batch, class_rows):
    """Expander.mask_logits_ (the compressed engine's apply) on logits with +inf and NaN: -inf where
    refused, as XGrammar's kernel writes, where adding a -inf bias would leave NaN."""
    from cfgzip_lab.classes.classing import TokenClasses
    from cfgzip_lab.expand import Expander

    rng = np.random.default_rng(batch * 10 + class_rows)
    vocab, num_classes = 3_001, 97
    class_of = rng.integers(0, num_classes, vocab).astype(np.int32)
    class_of[:num_classes] = np.arange(num_classes)
    reps = np.array([np.flatnonzero(class_of == k)[0] for k in range(num_classes)], dtype=np.int32)
    expander = Expander(TokenClasses(class_of, reps, np.zeros(num_classes, np.uint8)), backend="numpy")
    class_mask = torch.from_numpy(rng.integers(-(2**31), 2**31, (class_rows, 4), dtype=np.int64).astype(np.int32))
    logits = _logits(rng, (batch, vocab), dtype)
    logits[:, ::7] = float("inf")
    vocab_mask = expander.to_vocab_bitmask(class_mask)
    expected = _xgrammar(logits, vocab_mask, vocab)
    got, without_kernel = logits.clone(), logits.clone()
    assert expander.mask_logits_(got, class_mask) is got
    assert torch.equal(_bits(got), _bits(expected))
    assert not torch.isnan(got[~expander.to_allowed(class_mask).expand(batch, -1)]).any()
    # the numpy path that runs where the kernel is not built: the same bits
    expander.cpu.mask_logits_(without_kernel, class_mask.numpy())
    assert torch.equal(_bits(without_kernel), _bits(expected))
    strided = torch.stack([logits, logits], dim=1)[:, 0, :]  # rows two V apart
    expander.cpu.mask_logits_(strided, class_mask.numpy())
    assert torch.equal(_bits(strided.contiguous()), _bits(expected))


@needs_kernel
def test_logits_made_under_inference_mode_are_masked_outside_it():
    """A decode loop runs the forward under ``torch.inference_mode`` and masks afterwards: in-place
    torch ops refuse such tensors there, so every path writes through numpy (as XGrammar's kernel
    writes through its pointer). gpu_e2e --tiny found the strided case."""
    rng = np.random.default_rng(5)
    base = _logits(rng, (2, 3, 640), torch.float32)
    bitmask = torch.from_numpy(rng.integers(-(2**31), 2**31, (2, 20), dtype=np.int64).astype(np.int32))
    expected = _xgrammar(base[:, -1, :].contiguous(), bitmask, 640)
    with torch.inference_mode():
        strided = base.clone()[:, -1, :]  # the last position of (B, T, V): rows 3 V apart
        bf16 = base[:, -1, :].to(torch.bfloat16)
    apply_vocab_bitmask_inplace(strided, bitmask, 640)
    assert torch.equal(_bits(strided.contiguous()), _bits(expected))

    from cfgzip_lab.classes.classing import TokenClasses
    from cfgzip_lab.expand import Expander

    class_of = np.arange(640, dtype=np.int32)  # one token per class: class mask = vocabulary mask
    expander = Expander(TokenClasses(class_of, class_of.copy(), np.zeros(640, np.uint8)), backend="numpy")
    expected_bf16 = _xgrammar(bf16.clone(), bitmask, 640)
    expander.cpu.mask_logits_(bf16, bitmask.numpy())  # the numpy path's bf16 branch
    assert torch.equal(_bits(bf16), _bits(expected_bf16))
