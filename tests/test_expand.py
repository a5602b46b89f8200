"""Expansion of class bitmasks: equal to a naive numpy reference, in every output form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgzip_lab.bench import time_expansion
from cfgzip_lab.classes.classing import BLOCKED, NORMAL, TokenClasses
from cfgzip_lab.expand import (
    Expander,
    apply_vocab_bitmask_inplace,
    pack_bool_mask,
    unpack_bitmask,
)


def random_classes(vocab_size: int, num_classes: int, seed: int) -> TokenClasses:
    rng = np.random.default_rng(seed)
    class_of = rng.integers(0, num_classes, vocab_size).astype(np.int32)
    class_of[:num_classes] = np.arange(num_classes)  # every class has a member
    reps = np.array([np.flatnonzero(class_of == k)[0] for k in range(num_classes)], dtype=np.int32)
    kinds = np.full(num_classes, NORMAL, dtype=np.uint8)
    kinds[0] = BLOCKED
    return TokenClasses(class_of, reps, kinds)


def naive_allowed(class_of: np.ndarray, class_words: np.ndarray) -> np.ndarray:
    """Bit by bit, the way the format is defined: bit j of word w is class 32w+j."""
    rows = np.atleast_2d(class_words).astype(np.int64) & 0xFFFFFFFF
    out = np.zeros((rows.shape[0], class_of.shape[0]), dtype=bool)
    for b in range(rows.shape[0]):
        for t, k in enumerate(class_of):
            out[b, t] = (rows[b, k // 32] >> (k % 32)) & 1
    return out if np.ndim(class_words) == 2 else out[0]


def naive_pack(allowed: np.ndarray) -> np.ndarray:
    rows = np.atleast_2d(allowed)
    words = math.ceil(rows.shape[1] / 32)
    out = np.zeros((rows.shape[0], words), dtype=np.int64)
    for b in range(rows.shape[0]):
        for t in np.flatnonzero(rows[b]):
            out[b, t // 32] |= 1 << (t % 32)
    out = np.where(out >= 1 << 31, out - (1 << 32), out).astype(np.int32)
    return out if allowed.ndim == 2 else out[0]


def random_class_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    # Full-range words: bit 31 (the sign bit) and padding bits past K included.
    return torch.from_numpy(rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32))


# vocab_size__num_classes: sizes that end inside a word, on a word boundary, and tiny.
SIZES = [(1000, 37), (1024, 64), (33, 1), (31, 5), (4097, 300)]


@pytest.mark.parametrize("vocab_size, num_classes", SIZES)
@pytest.mark.parametrize("batch", [None, 3])
def test_vocab_bitmask_equals_naive_reference(vocab_size, num_classes, batch):
    classes = random_classes(vocab_size, num_classes, seed=vocab_size)
    expander = Expander(classes)
    rng = np.random.default_rng(num_classes)
    shape = (expander.class_bitmask_size,) if batch is None else (batch, expander.class_bitmask_size)
    for _ in range(3):
        class_mask = random_class_mask(rng, shape)
        allowed = naive_allowed(classes.class_of, class_mask.numpy())
        packed = expander.to_vocab_bitmask(class_mask)
        assert packed.dtype == torch.int32
        assert packed.shape == shape[:-1] + (math.ceil(vocab_size / 32),)
        np.testing.assert_array_equal(packed.numpy(), naive_pack(allowed))
        np.testing.assert_array_equal(expander.to_allowed(class_mask).numpy(), allowed)
        # numpy input gives the same
        np.testing.assert_array_equal(expander.to_vocab_bitmask(class_mask.numpy()).numpy(), packed.numpy())


@settings(max_examples=80, deadline=None)
@given(
    class_of=st.lists(st.integers(0, 69), min_size=1, max_size=200),
    words=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=3, max_size=3),
    backend=st.sampled_from(["numpy", "torch"]),
    large_class_tokens=st.integers(1, 8),
)
def test_expansion_is_the_gather_property(class_of, words, backend, large_class_tokens):
    num_classes = max(class_of) + 1
    class_of = np.array(class_of, dtype=np.int32)
    reps = np.array([np.flatnonzero(class_of == k)[0] if (class_of == k).any() else 0 for k in range(num_classes)])
    expander = Expander(
        TokenClasses(class_of, reps.astype(np.int32), np.zeros(num_classes, np.uint8)),
        backend=backend,
        large_class_tokens=large_class_tokens,  # small thresholds put classes in the union tables
    )
    class_mask = torch.tensor(words[: expander.class_bitmask_size], dtype=torch.int32)
    allowed = naive_allowed(class_of, class_mask.numpy())
    np.testing.assert_array_equal(expander.to_vocab_bitmask(class_mask).numpy(), naive_pack(allowed))
    np.testing.assert_array_equal(expander.to_allowed(class_mask).numpy(), allowed)


def skewed_classes(seed: int) -> TokenClasses:
    """A vocabulary's shape: 70 classes of 256+ tokens (more than the union tables take),
    600 small ones, ids shuffled over 60,001 tokens."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rng.integers(256, 3000, 70), rng.integers(1, 40, 600)])
    class_of = rng.permutation(np.repeat(np.arange(sizes.size), sizes))[:60_001].astype(
        np.int32
    )  # V % 32 != 0: padding bits
    num_classes = int(class_of.max()) + 1
    reps = np.array([np.flatnonzero(class_of == k)[0] if (class_of == k).any() else 0 for k in range(num_classes)])
    return TokenClasses(class_of, reps.astype(np.int32), np.zeros(num_classes, np.uint8))


@pytest.mark.parametrize("compiled_rows", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("large_class_tokens", [256, 1, 10**9])
def test_union_tables_give_the_gather_bit_for_bit(large_class_tokens, compiled_rows):
    """Large classes through the 16-row union tables, small ones scattered (numpy) or set from
    (word, bits) pairs (the compiled kernel's expand_row): every output form equals the direct
    definition, for masks with none, all and random classes allowed."""
    from cfgzip_lab._binding import kernel as compiled

    if compiled_rows and compiled is None:
        pytest.skip("the compiled kernel is not built here")
    classes = skewed_classes(seed=large_class_tokens % 97)
    class_of = np.asarray(classes.class_of)
    expander = Expander(classes, backend="numpy", large_class_tokens=large_class_tokens)
    expander.cpu.use_compiled = compiled_rows
    if large_class_tokens == 256:
        assert expander.cpu.large_groups.shape == (16, 4)  # 64 of the 70 large classes
    # Split into tables + scatter, except when no class counts as large: one whole gather.
    assert expander.cpu.gather_whole_row == (large_class_tokens == 10**9)
    rng = np.random.default_rng(3)
    w = expander.class_bitmask_size
    masks = [np.zeros((1, w), np.int32), np.full((1, w), -1, np.int32), random_class_mask(rng, (4, w)).numpy()]
    for class_mask in masks:
        bits = unpack_bitmask(class_mask, w * 32)
        allowed = bits[:, class_of]
        np.testing.assert_array_equal(expander.to_vocab_bitmask(class_mask).numpy(), pack_bool_mask(allowed).numpy())
        np.testing.assert_array_equal(expander.to_allowed(class_mask).numpy(), allowed)
        bias = expander.to_logits_bias(class_mask).numpy()
        np.testing.assert_array_equal(bias, np.where(allowed, np.float32(0), np.float32(-np.inf)))
        logits = torch.randn(class_mask.shape[0], class_of.size)
        expected = torch.where(torch.from_numpy(allowed), logits, torch.tensor(float("-inf")))
        assert torch.equal(expander.mask_logits_(logits, class_mask), expected)
    assert (expander.cpu._compiled is not None) == compiled_rows  # the path under test ran


@pytest.mark.parametrize("vocab_size, num_classes", SIZES)
def test_logits_bias_and_inplace_mask_equal_reference(vocab_size, num_classes):
    classes = random_classes(vocab_size, num_classes, seed=1)
    expander = Expander(classes)
    rng = np.random.default_rng(2)
    class_mask = random_class_mask(rng, (2, expander.class_bitmask_size))
    allowed = naive_allowed(classes.class_of, class_mask.numpy())

    bias = expander.to_logits_bias(class_mask)
    assert bias.shape == (2, vocab_size) and bias.dtype == torch.float32
    np.testing.assert_array_equal(bias.numpy(), np.where(allowed, 0.0, -np.inf).astype(np.float32))

    logits = torch.randn(2, vocab_size)
    expected = torch.where(torch.from_numpy(allowed), logits, torch.tensor(float("-inf")))
    assert expander.mask_logits_(logits, class_mask) is logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)


def test_inplace_mask_matches_xgrammar_kernel_on_expanded_bitmask():
    classes = random_classes(5000, 123, seed=3)
    expander = Expander(classes)
    class_mask = random_class_mask(np.random.default_rng(4), (4, expander.class_bitmask_size))
    logits = torch.randn(4, 5000)
    ours = expander.mask_logits_(logits.clone(), class_mask)
    theirs = apply_vocab_bitmask_inplace(logits.clone(), expander.to_vocab_bitmask(class_mask), 5000)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_logits(dtype):
    classes = random_classes(300, 20, seed=5)
    expander = Expander(classes)
    class_mask = random_class_mask(np.random.default_rng(6), (expander.class_bitmask_size,))
    allowed = torch.from_numpy(naive_allowed(classes.class_of, class_mask.numpy()))
    logits = torch.randn(300).to(dtype)
    expected = logits.masked_fill(~allowed, float("-inf"))
    expander.mask_logits_(logits, class_mask)
    assert logits.dtype == dtype
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    assert expander.to_logits_bias(class_mask, dtype=dtype).dtype == dtype


def test_broadcast_one_class_mask_over_a_batch_of_logits():
    classes = random_classes(200, 10, seed=7)
    expander = Expander(classes)
    class_mask = random_class_mask(np.random.default_rng(8), (expander.class_bitmask_size,))
    logits = torch.randn(3, 200)
    allowed = torch.from_numpy(naive_allowed(classes.class_of, class_mask.numpy()))
    expander.mask_logits_(logits, class_mask)
    assert torch.isinf(logits[:, ~allowed]).all() and torch.isfinite(logits[:, allowed]).all()


@pytest.mark.parametrize("vocab_size, num_classes", SIZES)
def test_torch_backend_equals_numpy_backend(vocab_size, num_classes):
    # The device path (torch ops, what CUDA runs) forced on CPU tensors.
    classes = random_classes(vocab_size, num_classes, seed=9)
    numpy_side, torch_side = Expander(classes), Expander(classes, backend="torch")
    rng = np.random.default_rng(10)
    for shape in [(numpy_side.class_bitmask_size,), (2, numpy_side.class_bitmask_size)]:
        class_mask = random_class_mask(rng, shape)
        for method in ("to_vocab_bitmask", "to_allowed", "to_logits_bias"):
            a = getattr(numpy_side, method)(class_mask)
            b = getattr(torch_side, method)(class_mask)
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        logits = torch.randn(shape[:-1] + (vocab_size,))
        a = numpy_side.mask_logits_(logits.clone(), class_mask)
        b = torch_side.mask_logits_(logits.clone(), class_mask)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_stays_on_device_and_equals_cpu():
    classes = random_classes(128_256, 3000, seed=11)
    expander = Expander(classes)
    class_mask = random_class_mask(np.random.default_rng(12), (8, expander.class_bitmask_size))
    cuda_mask = class_mask.cuda()
    packed = expander.to_vocab_bitmask(cuda_mask)
    assert packed.device.type == "cuda"
    np.testing.assert_array_equal(packed.cpu().numpy(), expander.to_vocab_bitmask(class_mask).numpy())
    logits = torch.randn(8, 128_256)
    expected = expander.mask_logits_(logits.clone(), class_mask)
    on_device = logits.cuda()
    expander.mask_logits_(on_device, class_mask)  # class mask moved to the logits' device
    torch.testing.assert_close(on_device.cpu(), expected, rtol=0, atol=0)
    bias = expander.to_logits_bias(cuda_mask)
    assert bias.device.type == "cuda"
    torch.testing.assert_close(bias.cpu(), expander.to_logits_bias(class_mask), rtol=0, atol=0)


def test_pack_and_unpack_round_trip_xgrammar_format():
    rng = np.random.default_rng(13)
    allowed = rng.random((2, 77)) < 0.5
    packed = pack_bool_mask(allowed)
    assert packed.shape == xgr.get_bitmask_shape(2, 77)
    np.testing.assert_array_equal(packed.numpy(), naive_pack(allowed))
    np.testing.assert_array_equal(unpack_bitmask(packed, 77), allowed)


def test_wrong_widths_are_refused():
    expander = Expander(random_classes(100, 40, seed=14))
    with pytest.raises(ValueError, match="words"):
        expander.to_vocab_bitmask(torch.zeros(5, dtype=torch.int32))
    with pytest.raises(ValueError, match="columns"):
        expander.mask_logits_(torch.zeros(99), torch.zeros(2, dtype=torch.int32))


def test_timing_helper_reports_every_step():
    result = time_expansion(Expander(random_classes(2000, 50, seed=15)), repeats=5)
    for step in ("to_vocab_bitmask", "to_logits_bias", "mask_logits_"):
        assert result[step]["median_us"] > 0


def test_row_memo_returns_equal_fresh_results_and_stays_bounded() -> None:
    """A class mask seen before is served from the memo: same bits, caller-owned output."""
    rng = np.random.default_rng(5)
    class_of = rng.integers(0, 70, size=5000).astype(np.int32)
    class_of[:70] = np.arange(70)
    classes = TokenClasses(class_of, np.arange(70, dtype=np.int32), np.zeros(70, dtype=np.uint8))
    expander = Expander(classes, backend="numpy", memo_bytes=3 * 640)  # room for 3 packed rows
    masks = [pack_bool_mask(rng.random((1, 96)) < 0.5) for _ in range(5)]
    first = [expander.to_vocab_bitmask(m).clone() for m in masks]
    again = [expander.to_vocab_bitmask(m) for m in masks]
    for a, b, m in zip(first, again, masks):
        assert torch.equal(a, b)
        expected = pack_bool_mask(unpack_bitmask(m.numpy(), 70)[..., class_of].astype(bool))
        assert torch.equal(b, expected)
    again[0][0, 0] = 0  # the caller may write into what it got
    assert torch.equal(expander.to_vocab_bitmask(masks[0]), first[0])
    assert len(expander.cpu.row_memo["vocab"]) <= 3


@pytest.mark.parametrize("strided", [False, True])
def test_mask_logits_writes_every_row_of_a_batch_in_place(strided):
    """One class mask per row, contiguous or transposed logits: the caller's tensor changes."""
    classes = random_classes(1000, 37, seed=1)
    expander = Expander(classes, backend="numpy")
    class_mask = random_class_mask(np.random.default_rng(0), (3, expander.class_bitmask_size))
    logits = torch.randn(1000, 3).t() if strided else torch.randn(3, 1000)
    before = logits.clone()
    allowed = unpack_bitmask(class_mask.numpy(), 64)[:, classes.class_of]
    assert expander.mask_logits_(logits, class_mask) is logits
    assert torch.equal(logits, torch.where(torch.from_numpy(allowed), before, torch.tensor(float("-inf"))))
