"""Plain XGrammar vs the compressed engine, per decode step, over several grammars.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_engines.py [--steps 200] [--batch 1,8] [GRAMMAR ...]

Runs :func:`cfgzip_lab.bench.bench_engines` (the grammar's sample documents replayed,
plain fill / plain fill + apply / compressed fill / compressed fill + expand + apply timed
side by side in this one process) with the Llama-3 vocabulary and prints one table of
medians, p90s and ratios, plus the machine. Never asserts on times.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*", default=["json", "c_like", "bython", "xml"])
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument(
        "--steps",
        type=int,
        default=200,
        help="steps timed per grammar and batch size, spread evenly over the whole samples (0: all)",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from cfgzip_lab.bench import bench_engines, machine_info, sample_docs
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(args.tokenizer)
    batches = [int(b) for b in args.batch.split(",")]
    head = (
        f"{'grammar':<10} {'K':>6} {'B':>3} {'steps':>5} | {'plain fill µs':>19} | {'comp. fill µs':>17} | "
        f"{'comp. fill+expand µs':>20} | {'comp. total µs':>17} | {'expand µs':>9} | {'fill ratio':>19} | "
        f"{'total ratio':>19}"
    )
    print(
        f"{args.tokenizer}: {vocab.vocab_size} tokens; µs are median / p90 per step; "
        "expand = class mask → packed vocabulary mask alone, a mask never seen before; "
        "fill ratio = plain fill / compressed (fill + expand); "
        "total ratio = plain (fill + apply) / compressed (fill + expand + apply)"
    )
    print(head)
    print("-" * len(head))
    for name in args.grammars:
        path = resolve_grammar(name)
        compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
        classes = build_classes(compiled, vocab).classes
        docs = sample_docs(path)
        t0 = time.perf_counter()
        r = bench_engines(
            compiled.text,
            vocab,
            classes,
            docs=docs,
            source="samples",
            batch_sizes=batches,
            steps=args.steps,
            expansion_repeats=50,
        )
        for b in r.batches:
            print(
                f"{path.stem:<10} {classes.num_classes:>6} {b.batch:>3} {b.steps:>5} | "
                f"{b.plain_fill.median_us:>8.1f} / {b.plain_fill.p90_us:>8.1f} | "
                f"{b.compressed_fill.median_us:>7.1f} / {b.compressed_fill.p90_us:>7.1f} | "
                f"{b.compressed_expanded.median_us:>8.1f} / {b.compressed_expanded.p90_us:>9.1f} | "
                f"{b.compressed_total.median_us:>7.1f} / {b.compressed_total.p90_us:>7.1f} | "
                f"{b.expansion['to_vocab_bitmask']['median_us']:>9.1f} | "
                f"{b.speedup_median:>8.2f}x {b.speedup_p90:>8.2f}x | "
                f"{b.speedup_total_median:>8.2f}x {b.speedup_total_p90:>8.2f}x",
                flush=True,
            )
        print(f"{'':<10} ({r.source}: {r.paths} paths, {r.path_tokens} tokens; {time.perf_counter() - t0:.1f} s)")
    m = machine_info()
    print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads, torch {m['torch']}, "
        f"xgrammar {m['xgrammar']}, python {m['python']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
