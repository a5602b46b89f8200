"""On CUDA: expansion time per step and SmolLM2 decode tokens/s (unconstrained, plain, compressed).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gpu_bench.py [--grammar c_like] [--tokens 32]

Expansion: :func:`cfgzip_lab.bench.time_expansion` on the GPU for the Llama-3 and
SmolLM2 vocabularies at batch 1 and 8 (class masks of each grammar's real size).
Decoding: :func:`cfgzip_lab.bench.bench_e2e` with the model on the GPU, greedy.
On a machine without CUDA it says so and exits 0. Never asserts on times.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammar", default="c_like")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--vocabs", default="llama3,smollm2")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (gpu_bench.py runs on a machine with a GPU)")
        return 0

    from cfgzip_lab.bench import bench_e2e, machine_info, sample_docs, time_expansion
    from cfgzip_lab.expand import Expander
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    path = resolve_grammar(args.grammar)
    compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
    print(f"expansion on {torch.cuda.get_device_name(0)}, grammar {path.stem} (median / p90 µs per step)")
    print(
        f"{'vocab':<8} {'V':>7} {'K':>6} {'B':>3} | {'to_vocab_bitmask':>19} | {'to_logits_bias':>19} | {'mask_logits_':>19}"
    )
    for name in args.vocabs.split(","):
        vocab = load_vocab(name)
        classes = build_classes(compiled, vocab).classes
        ex = Expander(classes)
        for batch in (1, 8):
            r = time_expansion(ex, batch_size=batch, repeats=200, device="cuda")
            cells = " | ".join(
                f"{r[k]['median_us']:>8.1f} / {r[k]['p90_us']:>8.1f}"
                for k in ("to_vocab_bitmask", "to_logits_bias", "mask_logits_")
            )
            print(f"{name:<8} {vocab.vocab_size:>7} {classes.num_classes:>6} {batch:>3} | {cells}", flush=True)

    docs = sample_docs(path)
    prompt = f"Write a short program like this one:\n{docs[0][:300]}" if docs else "Write a short example."
    e2e = bench_e2e(compiled.text, prompt, max_new_tokens=args.tokens, threads=None)
    print(f"\ndecoding, {e2e.model} on {e2e.device}, greedy, {e2e.max_new_tokens} new tokens")
    print(f"{'engine':<11} {'tokens/s':>9} {'tokens':>7} {'mask ms (median)':>17}")
    for k, rate in e2e.tokens_per_second.items():
        print(f"{k:<11} {rate:>9.1f} {e2e.tokens[k]:>7} {e2e.mask_ms_median[k]:>17.2f}")
    print(f"plain and compressed texts identical: {e2e.same_text}")
    m = machine_info()
    print(f"machine: {m['cpu']}, {m['cores']} cores, GPU {m['gpu']}, torch {m['torch']}, xgrammar {m['xgrammar']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
