"""Expansion backends (cfgzip_lab/kernels/): dispatch, and the Triton kernel bit for bit against the CPU path.

The CUDA tests run where a GPU is (skipped elsewhere); the interpreter test runs the same
Triton kernels on CPU tensors (``TRITON_INTERPRET=1``) where Triton is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from cfgzip_lab.classes.classing import TokenClasses
from cfgzip_lab.expand import Expander
from cfgzip_lab.kernels import BACKENDS, backend_class, backend_for
from cfgzip_lab.kernels.triton import available as triton_available

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
needs_cuda_triton = pytest.mark.skipif(
    not (torch.cuda.is_available() and triton_available()), reason="needs CUDA and Triton"
)


def llama_sized_classes(num_classes: int, seed: int, vocab_size: int = 128_256) -> TokenClasses:
    """Skewed like a real partition: a few huge classes, many small ones, ids shuffled."""
    rng = np.random.default_rng(seed)
    weights = rng.pareto(1.0, num_classes) + 1e-3
    class_of = rng.choice(num_classes, size=vocab_size, p=weights / weights.sum()).astype(np.int32)
    class_of[rng.permutation(vocab_size)[:num_classes]] = np.arange(num_classes)  # every class has a member
    _, reps = np.unique(class_of, return_index=True)
    return TokenClasses(class_of, reps.astype(np.int32), np.zeros(num_classes, np.uint8))


def random_class_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32))


# requested__device__expected
DISPATCH = [
    ("auto", "cpu", "numpy"),
    ("numpy", "cpu", "numpy"),
    ("torch", "cpu", "torch"),
    ("auto", "meta", "torch"),
]


@pytest.mark.parametrize("requested, device, expected", DISPATCH)
def test_requested__device__expected__dispatch(requested, device, expected):
    assert backend_for(requested, torch.device(device)) == expected


def test_triton_off_cuda_falls_back_to_torch_and_unknown_names_are_refused():
    if os.environ.get("TRITON_INTERPRET") != "1":
        assert backend_for("triton", torch.device("cpu")) == "torch"
    with pytest.raises(ValueError, match="unknown backend"):
        backend_for("cuda-magic", torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown backend"):
        Expander(llama_sized_classes(10, 0, vocab_size=100), backend="cuda-magic")


def test_every_registered_backend_imports_without_a_gpu():
    """The table names a module and class for each backend; Triton's module imports Triton lazily."""
    for name in BACKENDS:
        assert backend_class(name).name == name


@pytest.mark.skipif(
    not triton_available(), reason="needs Triton (requirements-test.txt on Linux x86-64; CUDA torch ships it)"
)
def test_triton_kernels_interpreted_on_cpu_equal_the_numpy_backend():
    """TRITON_INTERPRET=1 runs the kernels on CPU tensors: the bits must be the gather's."""
    script = textwrap.dedent(
        """
        import numpy as np, torch
        from cfgzip_lab.classes.classing import TokenClasses
        from cfgzip_lab.expand import Expander
        rng = np.random.default_rng(0)
        for V, K, B in [(1000, 37, 1), (4097, 300, 3), (33, 1, 1), (64, 40, 9), (5000, 1200, 17)]:
            class_of = rng.integers(0, K, V).astype(np.int32); class_of[:K] = np.arange(K)
            reps = np.array([np.flatnonzero(class_of == k)[0] for k in range(K)], dtype=np.int32)
            classes = TokenClasses(class_of, reps, np.zeros(K, np.uint8))
            ref, tri = Expander(classes, backend="numpy"), Expander(classes, backend="triton")
            assert tri.backend_on("cpu") == "triton"
            words = rng.integers(-(2**31), 2**31, (B, ref.class_bitmask_size), dtype=np.int64)
            cm = torch.from_numpy(words.astype(np.int32))
            assert torch.equal(ref.to_vocab_bitmask(cm), tri.to_vocab_bitmask(cm))
            for dtype in (torch.float32, torch.float16):
                logits = torch.randn(B, V).to(dtype)
                expected = logits.clone().masked_fill_(~ref.to_allowed(cm), float("-inf"))
                assert torch.equal(tri.mask_logits_(logits.clone(), cm), expected)
            # bound launchers read their buffers' current contents at every call
            cm_buf, out_buf = torch.zeros_like(cm), torch.empty(B, ref.vocab_bitmask_size, dtype=torch.int32)
            logits_buf = torch.zeros(B, V, dtype=torch.bfloat16)
            to_vocab = tri.triton.bind("to_vocab_bitmask", cm_buf, out_buf)
            mask = tri.triton.bind("mask_logits_", logits_buf, cm_buf)
            for _ in range(2):
                words = torch.from_numpy(rng.integers(-(2**31), 2**31, cm.shape, dtype=np.int64).astype(np.int32))
                fresh = torch.randn(B, V).to(torch.bfloat16)
                cm_buf.copy_(words); logits_buf.copy_(fresh)
                to_vocab(); mask()
                assert torch.equal(out_buf, ref.to_vocab_bitmask(words))
                assert torch.equal(logits_buf, fresh.masked_fill(~ref.to_allowed(words), float("-inf")))
        print("interpreted ok")
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "interpreted ok" in done.stdout


@needs_cuda_triton
@pytest.mark.parametrize("num_classes", [1, 324, 4001, 40_000])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_triton_packed_mask_equals_cpu_bit_for_bit(num_classes, batch):
    classes = llama_sized_classes(num_classes, seed=num_classes + batch)
    cpu = Expander(classes, backend="numpy")
    gpu = Expander(classes)
    assert gpu.backend_on("cuda") == "triton"
    rng = np.random.default_rng(batch)
    w = cpu.class_bitmask_size
    for class_mask in (
        random_class_mask(rng, (batch, w)),
        torch.zeros(batch, w, dtype=torch.int32),
        torch.full((batch, w), -1, dtype=torch.int32),
    ):
        expected = cpu.to_vocab_bitmask(class_mask)
        got = gpu.to_vocab_bitmask(class_mask.cuda())
        assert got.device.type == "cuda" and got.dtype == torch.int32
        assert torch.equal(got.cpu(), expected)
        out = torch.full_like(got, 0x5A5A5A5A)  # poisoned: every word must be written
        assert gpu.to_vocab_bitmask(class_mask.cuda(), out=out) is out
        assert torch.equal(out.cpu(), expected)


@needs_cuda_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch, class_rows", [(1, 1), (8, 8), (8, 1), (64, 64)])
def test_triton_inplace_mask_equals_cpu_bit_for_bit(dtype, batch, class_rows):
    classes = llama_sized_classes(4001, seed=batch)
    cpu, gpu = Expander(classes, backend="numpy"), Expander(classes)
    rng = np.random.default_rng(batch + class_rows)
    class_mask = random_class_mask(rng, (class_rows, cpu.class_bitmask_size))
    logits = torch.randn(batch, classes.class_of.shape[0]).to(dtype)
    allowed = cpu.to_allowed(class_mask)
    expected = logits.masked_fill(~allowed, float("-inf"))
    on_device = logits.cuda()
    assert gpu.mask_logits_(on_device, class_mask.cuda()) is on_device
    assert torch.equal(on_device.cpu(), expected)


@needs_cuda_triton
def test_triton_expansion_is_cuda_graph_capturable():
    """Captured once on static buffers, replayed on new class masks: same bits as the CPU path."""
    classes = llama_sized_classes(4001, seed=3)
    cpu, gpu = Expander(classes, backend="numpy"), Expander(classes)
    w, batch, vocab = cpu.class_bitmask_size, 8, classes.class_of.shape[0]
    static_mask = torch.zeros(batch, w, dtype=torch.int32, device="cuda")
    static_out = torch.empty(batch, gpu.vocab_bitmask_size, dtype=torch.int32, device="cuda")
    static_logits = torch.zeros(batch, vocab, dtype=torch.bfloat16, device="cuda")
    gpu.to_vocab_bitmask(static_mask, out=static_out)  # compile and upload outside the capture
    gpu.mask_logits_(static_logits, static_mask)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gpu.to_vocab_bitmask(static_mask, out=static_out)
        gpu.mask_logits_(static_logits, static_mask)
    rng = np.random.default_rng(4)
    for _ in range(3):
        class_mask = random_class_mask(rng, (batch, w))
        logits = torch.randn(batch, vocab).to(torch.bfloat16)
        static_mask.copy_(class_mask)
        static_logits.copy_(logits)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out.cpu(), cpu.to_vocab_bitmask(class_mask))
        assert torch.equal(static_logits.cpu(), logits.masked_fill(~cpu.to_allowed(class_mask), float("-inf")))


@needs_cuda_triton
def test_bound_launchers_follow_their_buffers():
    """bind(): compiled once for fixed buffers, each call reads their current contents."""
    classes = llama_sized_classes(4001, seed=7)
    cpu, gpu = Expander(classes, backend="numpy"), Expander(classes)
    w, batch, vocab = cpu.class_bitmask_size, 4, classes.class_of.shape[0]
    class_mask = torch.zeros(batch, w, dtype=torch.int32, device="cuda")
    out = torch.empty(batch, gpu.vocab_bitmask_size, dtype=torch.int32, device="cuda")
    logits = torch.zeros(batch, vocab, dtype=torch.bfloat16, device="cuda")
    to_vocab = gpu.triton.bind("to_vocab_bitmask", class_mask, out)
    mask = gpu.triton.bind("mask_logits_", logits, class_mask)
    rng = np.random.default_rng(8)
    for _ in range(3):
        words = random_class_mask(rng, (batch, w))
        fresh = torch.randn(batch, vocab).to(torch.bfloat16)
        class_mask.copy_(words)
        logits.copy_(fresh)
        to_vocab()
        mask()
        assert torch.equal(out.cpu(), cpu.to_vocab_bitmask(words))
        assert torch.equal(logits.cpu(), fresh.masked_fill(~cpu.to_allowed(words), float("-inf")))
    with pytest.raises(ValueError, match="int32 class mask"):
        gpu.triton.bind("to_vocab_bitmask", class_mask.to(torch.int64), out)


@needs_cuda
def test_torch_backend_on_cuda_equals_cpu():
    """The fallback when Triton is missing stays exact too."""
    classes = llama_sized_classes(4001, seed=5)
    cpu, gpu = Expander(classes, backend="numpy"), Expander(classes, backend="torch")
    class_mask = random_class_mask(np.random.default_rng(6), (8, cpu.class_bitmask_size))
    assert torch.equal(gpu.to_vocab_bitmask(class_mask.cuda()).cpu(), cpu.to_vocab_bitmask(class_mask))
