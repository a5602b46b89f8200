"""End to end on one GPU: a random-weight Llama-3-shaped model, forced sample documents, a mask every step.

    HF_HUB_OFFLINE=1 python benchmarks/gpu_e2e.py [--shapes 8b,1b] [--grammars c_like,bython]
        [--batches 1,8,32] [--steps 32] [--budget-s 420] [--json out.json]
    python benchmarks/gpu_e2e.py --tiny      # the same script on CPU with a 2-layer model, in a minute

No download: the model is built from transformers' ``LlamaConfig`` with Llama-3.2-1B or
Llama-3.1-8B's shape (vocabulary 128,256, the ``llama3`` table from quicktok-v1) and random
weights, on the GPU in bf16. Each grammar's longest sample document is tokenized; its
tokens before the middle ``--steps`` are the prompt (prefilled at once); those are forced
one at a time, B copies side by side: at every step the model runs one forward pass, the
mask is filled and applied to the logits, the argmax is read back (what a sampler
costs), and the document's token is fed. Side by side in one process, per
(shape, grammar, batch):

- ``none``:                 no grammar (the baseline);
- ``plain``:                XGrammar over the whole vocabulary, serial (fill after the forward);
- ``compressed``:           CFGzip serial: class fill, then expansion on the GPU (Triton);
- ``compressed_overlap``:   the next step's accept + fill on a CPU worker while the forward runs
                            (:mod:`cfgzip_lab.overlap`);
- ``native`` / ``native_overlap``: the native engine (``cfgzip_lab.native``) when it exists.

Reported: tokens/s (B × steps / wall time), its ratio to the faster of ``none`` (measured
first) and ``none_again`` (measured last), the main thread's mask
time per step (median / p90: fill + apply, or wait + apply when overlapped) and the
worker's fill time. Then the expansion kernels on the GPU: numpy (CPU), torch ops and the
Triton kernel, packed mask and in-place bf16 masking, batch 1 to 64, median / p90 over
``--expansion-calls`` calls timed with CUDA events (each call between two events; also
replayed from a CUDA graph, and the host time per launch).

The JSON (``--json``) is rewritten after every measurement, so a run stopped at its time
limit keeps what it measured; ``--budget-s`` skips what would not fit. Never asserts on
times. The project's targets (H100/H200, 8B shape): compressed overlapped ≥ 0.95x unconstrained
on c_like and bython at batch 1 and 8; Triton expansion ≤ 20 µs at batch 1, ≤ 40 µs at 64.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES: dict[str, dict[str, Any]] = {
    # Llama-3.2-1B and Llama-3.1-8B (config.json of the released models), vocabulary 128,256.
    "1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    ),
}


def build_model(shape: str, vocab_size: int, device, dtype):
    """A random-weight LlamaForCausalLM of ``shape``, built directly on ``device`` in ``dtype``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        bos_token_id=128000,
        eos_token_id=128009,
        **SHAPES[shape],
    )
    old = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def quantiles(seconds: list[float]) -> dict[str, float]:
    import numpy as np

    if not seconds:
        return {"median_ms": float("nan"), "p90_ms": float("nan")}
    a = np.asarray(seconds) * 1e3
    return {"median_ms": float(np.median(a)), "p90_ms": float(np.percentile(a, 90))}


# ---------------------------------------------------------------------------------------
# One decode run: forced tokens, B rows, one engine mode
# ---------------------------------------------------------------------------------------
def run_mode(model, cache_name, prompt, forced, batch, mode, matchers_for, worker, device) -> dict[str, Any]:
    """Prefill ``prompt`` (B copies), then force ``forced`` one token at a time under ``mode``."""
    import torch

    matchers = matchers_for(mode, batch)  # None, or an engine with the common batch interface
    bitmasks = [matchers.allocate_bitmask(), matchers.allocate_bitmask()] if matchers is not None else None
    for t in prompt:  # advance the grammar through the prompt (untimed)
        if matchers is not None and not all(matchers.accept_tokens([t] * batch)):
            raise RuntimeError(f"{mode}: the grammar refuses prompt token {t}")
    ids = torch.tensor([prompt] * batch, dtype=torch.long, device=device)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
    past = getattr(out, cache_name, None)
    logits = out.logits[:, -1, :]
    overlap = mode.endswith("_overlap")
    mask_s: list[float] = []
    fill_s: list[float] = []
    forward_s: list[float] = []

    def fill(buffer) -> float:
        t0 = time.perf_counter()
        matchers.fill_next_token_bitmask(buffer)
        return time.perf_counter() - t0

    def accept_and_fill(token, buffer) -> float:
        if not all(matchers.accept_tokens([token] * batch)):
            raise RuntimeError(f"{mode}: the grammar refuses forced token {token}")
        return fill(buffer)

    if torch.cuda.is_available() and device.type == "cuda":
        torch.cuda.synchronize()
    pending = None
    if matchers is not None and overlap:
        fill_s.append(fill(bitmasks[0]))
    start = time.perf_counter()
    for step, token in enumerate(forced):
        buffer = bitmasks[step % 2] if bitmasks else None
        if matchers is not None:
            t0 = time.perf_counter()
            if overlap:
                if pending is not None:
                    fill_s.append(pending.result())
            else:
                fill_s.append(fill(buffer))
            matchers.apply_bitmask_inplace(logits, buffer)
            mask_s.append(time.perf_counter() - t0)
        # What a sampler costs: the choice read back on the host (we then force the document's token).
        _ = torch.argmax(logits, dim=-1).tolist()
        if matchers is not None and overlap:
            pending = worker.submit(accept_and_fill, token, bitmasks[(step + 1) % 2])
        elif matchers is not None:
            if not all(matchers.accept_tokens([token] * batch)):
                raise RuntimeError(f"{mode}: the grammar refuses forced token {token}")
        t1 = time.perf_counter()
        with torch.inference_mode():
            out = model(
                input_ids=torch.full((batch, 1), token, dtype=torch.long, device=device),
                use_cache=True,
                **{cache_name: past},
            )
        past = getattr(out, cache_name, None)
        logits = out.logits[:, -1, :]
        forward_s.append(time.perf_counter() - t1)
    if pending is not None:
        pending.result()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    steps = len(forced)
    return {
        "mode": mode,
        "batch": batch,
        "steps": steps,
        "seconds": seconds,
        "tokens_per_s": batch * steps / seconds,
        "mask": quantiles(mask_s),
        "fill": quantiles(fill_s),
        "forward_launch": quantiles(forward_s),
    }


# ---------------------------------------------------------------------------------------
# Expansion kernels
# ---------------------------------------------------------------------------------------
def time_kernels(expander, batches, calls, device, backends=("numpy", "torch", "triton", "triton_bound")):
    """Median / p90 µs per call of each backend, packed mask and in-place bf16 masking.

    ``triton_bound``: the same kernels through :meth:`TritonExpansion.bind` (compiled once
    for fixed buffers, launched without Triton's per-call dispatch), checked equal to the
    JIT launch's result before it is timed.
    """
    import numpy as np
    import torch

    rows = []
    rng = np.random.default_rng(0)
    cuda = device.type == "cuda"
    has_triton = cuda and expander.backend_on(device) == "triton"
    backends = [b for b in backends if has_triton or not b.startswith("triton")]
    for batch in batches:
        words = rng.integers(-(2**31), 2**31, (batch, expander.class_bitmask_size), dtype=np.int64)
        class_cpu = torch.from_numpy(words.astype(np.int32))
        class_dev = class_cpu.to(device)
        logits_dev = torch.randn(batch, expander.vocab_size, device=device).to(
            torch.bfloat16 if cuda else torch.float32
        )
        out_dev = torch.empty(batch, expander.vocab_bitmask_size, dtype=torch.int32, device=device)
        for backend in backends:
            for op in ("to_vocab_bitmask", "mask_logits_"):
                row = {"backend": backend, "op": op, "batch": batch, "calls": calls}
                if backend == "numpy":
                    logits_cpu = torch.randn(batch, expander.vocab_size)

                    def call(op=op, class_cpu=class_cpu, logits_cpu=logits_cpu):
                        expander.clear_memo()  # a class mask never seen before
                        if op == "to_vocab_bitmask":
                            expander.cpu.to_vocab_bitmask(class_cpu.numpy())
                        else:
                            expander.cpu.mask_logits_(logits_cpu, class_cpu.numpy())
                elif backend == "torch":

                    def call(op=op, class_dev=class_dev, logits_dev=logits_dev):
                        if op == "to_vocab_bitmask":
                            expander.torch.to_vocab_bitmask(class_dev)
                        else:
                            expander.torch.mask_logits_(logits_dev, class_dev)
                elif backend == "triton":

                    def call(op=op, class_dev=class_dev, logits_dev=logits_dev, out_dev=out_dev):
                        if op == "to_vocab_bitmask":
                            expander.triton.to_vocab_bitmask(class_dev, out=out_dev)
                        else:
                            expander.triton.mask_logits_(logits_dev, class_dev)
                else:
                    try:
                        if op == "to_vocab_bitmask":
                            call = expander.triton.bind(op, class_dev, out_dev)
                            call()
                            row["equal_to_jit"] = bool(
                                torch.equal(out_dev, expander.triton.to_vocab_bitmask(class_dev))
                            )
                        else:
                            probe = torch.randn_like(logits_dev)
                            reference = expander.triton.mask_logits_(probe.clone(), class_dev)
                            call = expander.triton.bind(op, probe, class_dev)
                            call()
                            row["equal_to_jit"] = bool(torch.equal(probe, reference))
                            call = expander.triton.bind(op, logits_dev, class_dev)
                    except Exception as exc:  # noqa: BLE001 - reported, the other rows still run
                        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                        rows.append(row)
                        continue
                row.update(
                    _time_calls(call, calls if backend != "numpy" else min(calls, 100), cuda and backend != "numpy")
                )
                if cuda and backend.startswith("triton"):
                    row.update(_time_graph(call, calls))
                rows.append(row)
    return rows


def _time_calls(call, calls: int, cuda: bool) -> dict[str, float]:
    import numpy as np
    import torch

    for _ in range(20):
        call()
    if not cuda:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        us = np.asarray(times) * 1e6
        return {"median_us": float(np.median(us)), "p90_us": float(np.percentile(us, 90)), "timer": "wall"}
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    host = []
    for start, end in events:
        start.record()
        t0 = time.perf_counter()
        call()
        host.append(time.perf_counter() - t0)
        end.record()
    torch.cuda.synchronize()
    us = np.asarray([s.elapsed_time(e) * 1e3 for s, e in events])
    return {
        "median_us": float(np.median(us)),
        "p90_us": float(np.percentile(us, 90)),
        "host_launch_us": float(np.median(np.asarray(host) * 1e6)),
        "timer": "cuda events per call",
    }


def _time_graph(call, calls: int) -> dict[str, float]:
    """The same call captured once in a CUDA graph and replayed: the kernel without Python's launch."""
    import numpy as np
    import torch

    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            call()
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for start, end in events:
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        us = np.asarray([s.elapsed_time(e) * 1e3 for s, e in events])
        return {"graph_median_us": float(np.median(us)), "graph_p90_us": float(np.percentile(us, 90))}
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return {"graph_error": f"{type(exc).__name__}: {exc}"[:300]}


# ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="8b,1b")
    ap.add_argument("--grammars", default="c_like,bython")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--modes", default="none,plain,compressed,compressed_overlap,native,native_overlap,none_again")
    ap.add_argument("--expansion-calls", type=int, default=500)
    ap.add_argument("--expansion-batches", default="1,8,32,64")
    ap.add_argument("--expansion-backends", default="numpy,torch,triton,triton_bound")
    ap.add_argument(
        "--plain-batches",
        default="8b=1,8;1b=1",
        help="where plain XGrammar runs (shape=batches;...): its fill costs seconds a step at p90",
    )
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip measurements that would start after this")
    ap.add_argument(
        "--fill-threads",
        default="auto",
        help="XGrammar's batch-fill threads (an int or auto); fewer leave the launch-bound forward more host",
    )
    ap.add_argument("--json", default="gpu_e2e.json")
    ap.add_argument("--tiny", action="store_true", help="CPU, a 2-layer model, 6 steps, batch 1 and 2")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.perf_counter()

    import torch

    from cfgzip_lab.bench import machine_info, sample_docs
    from cfgzip_lab.decode import _cache_argument
    from cfgzip_lab.engine import BatchMatcher, compile_engines
    from cfgzip_lab.overlap import MaskWorker
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    cuda = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.tiny:
        args.shapes, args.batches, args.steps = "tiny", "1,2", min(args.steps, 6)
        args.expansion_calls, args.expansion_batches = min(args.expansion_calls, 30), "1,8"
    elif not cuda:
        print("no CUDA device: run with --tiny on a CPU machine")
        return 0
    shapes = args.shapes.split(",")
    plain_batches = {}
    for part in filter(None, args.plain_batches.split(";")):
        shape_name, _, listed = part.partition("=")
        plain_batches[shape_name] = {int(b) for b in listed.split(",") if b}
    batches = [int(b) for b in args.batches.split(",")]
    if args.tiny:
        plain_batches = {"tiny": set(batches)}
    modes = args.modes.split(",")
    try:
        import cfgzip_lab.native as native  # noqa: F401
        from cfgzip_lab.native import build_native_engine
    except ImportError:
        build_native_engine = None
    if build_native_engine is None:
        modes = [m for m in modes if not m.startswith("native")]

    result: dict[str, Any] = {
        "machine": machine_info(),
        "args": vars(args),
        "e2e": [],
        "expansion": [],
        "skipped": [],
        "setup": {},
    }
    out_path = Path(args.json)

    def save() -> None:
        out_path.write_text(json.dumps(result, indent=1))

    def left() -> float:
        return args.budget_s - (time.perf_counter() - t_start)

    vocab = load_vocab("llama3")
    grammars = {}
    for name in args.grammars.split(","):
        t0 = time.perf_counter()
        path = resolve_grammar(name)
        text = path.read_text(encoding="utf-8")
        compiled = compile_grammar(text, source=str(path))
        classing = build_classes(compiled, vocab)
        engines = compile_engines(text, vocab, classing.classes)
        doc = max(sample_docs(path), key=len)
        tokens = [int(t) for t in vocab.encode(doc)]
        m = engines.plain()
        path_ok = []
        for t in tokens:
            if not m.accept_token(t):
                break
            path_ok.append(t)
        _ = engines.plain_grammar, engines.compressed_grammar  # compile both now, untimed
        entry = {"compiled": compiled, "classing": classing, "engines": engines, "tokens": path_ok, "native": None}
        setup = {
            "classes": classing.classes.num_classes,
            "doc_tokens": len(path_ok),
            "setup_s": round(time.perf_counter() - t0, 2),
        }
        if build_native_engine is not None and any(m.startswith("native") for m in modes):
            t1 = time.perf_counter()
            try:
                entry["native"] = build_native_engine(
                    compiled, vocab, classing.classes, classing=classing, xgrammar_engines=engines
                )
                setup["native_build_s"] = round(time.perf_counter() - t1, 2)
            except Exception as exc:  # noqa: BLE001 - reported, the other modes still run
                setup["native_error"] = f"{type(exc).__name__}: {exc}"[:300]
        grammars[name] = entry
        result["setup"][name] = setup
        print(f"setup {name}: {setup}", flush=True)
    save()

    fill_threads = args.fill_threads if args.fill_threads == "auto" else int(args.fill_threads)

    def matchers_for(grammar):
        entry = grammars[grammar]
        engines = entry["engines"]

        def make(mode: str, batch: int):
            base = mode.removesuffix("_overlap")
            if base.startswith("none"):  # "none", and "none_again" (the baseline again, last)
                return None
            if base == "plain":
                return BatchMatcher([engines.plain() for _ in range(batch)], max_threads=fill_threads)
            if base == "compressed":
                return BatchMatcher([engines.compressed() for _ in range(batch)], max_threads=fill_threads)
            if base == "native":
                return entry["native"].batch(batch)
            raise ValueError(mode)

        return make

    worker = MaskWorker()
    # Expansion kernels first: short, and what the Triton targets are about.
    first = grammars[next(iter(grammars))]
    for name, entry in grammars.items():
        if left() < 30:
            result["skipped"].append(f"expansion {name}")
            continue
        ex = entry["engines"].expander
        exp_batches = [int(b) for b in args.expansion_batches.split(",")]
        if not args.expansion_calls:
            break
        for row in time_kernels(ex, exp_batches, args.expansion_calls, device, args.expansion_backends.split(",")):
            row.update(grammar=name, classes=ex.num_classes, vocab=ex.vocab_size)
            result["expansion"].append(row)
        save()
    del first

    models = {}
    for shape in shapes:
        t0 = time.perf_counter()
        models[shape] = build_model(shape, vocab.vocab_size, device, dtype)
        print(f"model {shape}: built in {time.perf_counter() - t0:.1f} s on {device} ({dtype})", flush=True)
    cache_name = _cache_argument(next(iter(models.values())))
    # Priority order, so that a run stopped by the budget has the targets first: every
    # shape at batch 1 and 8 (first shape first), then the larger batches.
    small = [b for b in batches if b <= 8]
    plan = [(s, g, b) for bs in (small, [b for b in batches if b > 8]) for s in shapes for b in bs for g in grammars]
    for shape, grammar, batch in plan:
        entry = grammars[grammar]
        tokens = entry["tokens"]
        steps = min(args.steps, max(1, len(tokens) - 2))
        # The middle of the document: its head (comments, #include lines) is cheap for every engine.
        cut = max(1, (len(tokens) - steps) // 2)
        prompt, forced = tokens[:cut], tokens[cut : cut + steps]
        rows = []
        model = models[shape]
        if left() > 20:
            # One whole untimed run first: the KV cache grows a step at a time, and the first
            # run at a new prompt length or batch pays cudaMalloc for every new size (measured
            # on an H200: the first mode of each configuration ran at a third of the speed).
            run_mode(model, cache_name, prompt, forced, batch, "none", matchers_for(grammar), worker, device)
        for mode in modes:
            if mode.startswith("native") and entry["native"] is None:
                continue
            if mode.startswith("plain") and batch not in plain_batches.get(shape, ()):
                continue
            if left() < 20:
                result["skipped"].append(f"{shape} {grammar} b{batch} {mode}")
                continue
            # Warm-up (compilation, autotuning) left out of the timing.
            run_mode(model, cache_name, prompt, forced[:2], batch, mode, matchers_for(grammar), worker, device)
            r = run_mode(model, cache_name, prompt, forced, batch, mode, matchers_for(grammar), worker, device)
            r.update(shape=shape, grammar=grammar)
            rows.append(r)
            result["e2e"].append(r)
            save()
        # Against the faster of the two unconstrained runs (before and after the engines): on
        # the H200 they differed by up to 20%, so the ratios err on the side of the baseline.
        base = max((r["tokens_per_s"] for r in rows if r["mode"].startswith("none")), default=None)
        for r in rows:
            r["vs_none"] = r["tokens_per_s"] / base if base else None
            print(
                f"{shape:>4} {grammar:<8} b{batch:<3} {r['mode']:<19} {r['tokens_per_s']:9.1f} tok/s"
                f"  x{(r['vs_none'] or 0):.2f}  mask {r['mask']['median_ms']:8.2f} / {r['mask']['p90_ms']:8.2f} ms"
                f"  fill {r['fill']['median_ms']:8.2f} ms",
                flush=True,
            )
        save()
    worker.close()
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    save()
    print_tables(result)
    return 0


def print_tables(result: dict[str, Any]) -> None:
    m = result["machine"]
    print(
        f"\nmachine: {m.get('gpu') or 'no GPU'}; CPU {m['cpu']} ({m['cores']} cores); torch {m['torch']}; "
        f"xgrammar {m['xgrammar']}; {result.get('seconds')} s"
    )
    print("\nexpansion, µs per call (median / p90; triton: eager with CUDA events | graph replay)")
    for r in result["expansion"]:
        if "error" in r:
            print(
                f"  {r['grammar']:<8} K={r['classes']:<5} {r['backend']:<12} {r['op']:<16} b{r['batch']:<3} {r['error']}"
            )
            continue
        graph = f" | graph {r['graph_median_us']:.1f} / {r['graph_p90_us']:.1f}" if "graph_median_us" in r else ""
        host = f" host {r['host_launch_us']:.1f}" if "host_launch_us" in r else ""
        print(
            f"  {r['grammar']:<8} K={r['classes']:<5} {r['backend']:<12} {r['op']:<16} b{r['batch']:<3}"
            f" {r['median_us']:8.1f} / {r['p90_us']:8.1f}{graph}{host}"
        )
    print("\nend to end, tokens/s (x unconstrained); main-thread mask ms median / p90")
    for r in result["e2e"]:
        print(
            f"  {r['shape']:>4} {r['grammar']:<8} b{r['batch']:<3} {r['mode']:<19} {r['tokens_per_s']:9.1f}"
            f"  x{(r.get('vs_none') or 0):.2f}  {r['mask']['median_ms']:7.2f} / {r['mask']['p90_ms']:7.2f}"
        )
    if result["skipped"]:
        print(f"skipped (time budget): {result['skipped']}")


if __name__ == "__main__":
    sys.exit(main())
