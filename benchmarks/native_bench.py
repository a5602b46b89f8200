"""The native engine beside plain and compressed XGrammar, per bundled grammar, in one table.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/native_bench.py [--steps 200] [--check] [--json OUT] [GRAMMAR ...]

For each grammar (default: every bundled one) with Llama-3: classing, the native σ_in index
(build time, trie nodes, size of its cache arrays, resident memory added while building and
its peak above where the build started: VmHWM reset through /proc/self/clear_refs), then :func:`cfgzip_lab.bench.bench_engines` with ``engine_names=("plain", "compressed",
"native")`` over the sample documents (``--steps`` timed steps spread over them): per engine
the packed vocabulary mask (plain fill; compressed fill + expansion; native fill) at the median
and p90, and accept_token at the median. ``--check`` then replays every sample-document step
and compares the native mask with plain XGrammar's, bit for bit (grammars in parallel
processes, after the timing). Prints a table and the machine; never asserts on wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Reset this process's peak resident size (VmHWM) to its current one; False where Linux refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))


def _setup(name: str, tokenizer: str):
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(tokenizer)
    path = resolve_grammar(name)
    compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
    t0 = time.perf_counter()
    classing = build_classes(compiled, vocab)
    return path, compiled, vocab, classing, time.perf_counter() - t0


def measure(
    name: str,
    tokenizer: str,
    steps: int,
    engine_names=("plain", "compressed", "native"),
    clock=time.perf_counter,
    fill_untimed=(),
) -> dict:
    from cfgzip_lab.bench import bench_engines, sample_docs
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine

    path, compiled, vocab, classing, classing_s = _setup(name, tokenizer)
    classes = classing.classes
    engines = compile_engines(compiled.text, vocab, classes)
    peak_known = _reset_peak()
    rss = _rss_mb()
    t0 = time.perf_counter()
    native = build_native_engine(compiled, vocab, classes, classing=classing, xgrammar_engines=engines)
    index_s = time.perf_counter() - t0
    index_rss = _rss_mb() - rss
    index_peak = _peak_mb() - rss if peak_known else float("nan")  # the build's own peak above where it started
    index_bytes = sum(a.nbytes for a in native.index.to_arrays().values())
    names = tuple(engine_names)
    bench = bench_engines(
        compiled.text,
        vocab,
        classes,
        docs=sample_docs(path),
        source="samples",
        steps=steps,
        expansion_repeats=0,
        engines=engines,
        engine_names=names,
        native=native,
        clock=clock,
        fill_untimed=fill_untimed,
    )
    b = bench.batches[0]
    return {
        "grammar": name,
        "tokenizer": vocab.name,
        "classes": classes.num_classes,
        "steps": b.steps,
        "path_tokens": bench.path_tokens,
        "classing_s": round(classing_s, 2),
        "index_build_s": round(index_s, 3),
        "index_rss_mb": round(index_rss, 1),
        "index_peak_mb": round(index_peak, 1),
        "compiled_rows": native.rows.compiled,
        "index_cache_kb": round(index_bytes / 1024, 1),
        "trie_nodes": native.index.num_nodes,
        **native.index.stats,
        **b.summary(names),
        "native_stats": native.stats(),
    }


def check(name: str, tokenizer: str) -> dict:
    """Every sample-document step: native mask == plain XGrammar mask (and accept agrees)."""
    import numpy as np

    from cfgzip_lab.bench import sample_docs
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine

    path, compiled, vocab, classing, _ = _setup(name, tokenizer)
    engines = compile_engines(compiled.text, vocab, classing.classes)
    native = build_native_engine(compiled, vocab, classing.classes, classing=classing, xgrammar_engines=engines)
    steps = mismatches = 0
    for doc in sample_docs(path):
        plain, m = engines.plain(), native.matcher()
        for t in vocab.encode(doc):
            steps += 1
            if not np.array_equal(plain.next_vocab_bitmask().numpy(), m.next_vocab_bitmask().numpy()):
                mismatches += 1
            ok = plain.accept_token(t)
            if ok != m.accept_token(t):
                mismatches += 1
            if not ok:
                break
    return {"grammar": name, "steps": steps, "mismatches": mismatches, "fallbacks": native.fallbacks}


def main() -> int:
    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.bundled import bundled_grammars

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grammars", nargs="*")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--engines", default="plain,compressed,native")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with this thread's CPU time (time.thread_time) instead of wall time",
    )
    ap.add_argument(
        "--fill-untimed",
        default="",
        help="engines that also fill at the untimed steps, as a decode loop does (e.g. compressed,native)",
    )
    args = ap.parse_args()
    fill_untimed = tuple(e for e in args.fill_untimed.split(",") if e)
    engine_names = args.engines.split(",")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    names = args.grammars or list(bundled_grammars())
    rows = []
    print(
        f"{'grammar':<26} {'K':>5} | {'plain mask µs':>17} | {'compressed mask µs':>18} | {'native mask µs':>15} | "
        f"{'accept µs p/c/n':>17} | {'index s / nodes / KB / MB added / MB peak':>42}",
        flush=True,
    )
    for name in names:
        r = measure(name, args.tokenizer, args.steps, engine_names, clock, fill_untimed)
        rows.append(r)

        def q(e: str, r: dict = r) -> str:
            return f"{r[f'{e}_mask_median_us']:,.1f} / {r[f'{e}_mask_p90_us']:,.1f}" if e in engine_names else "-"

        def a(e: str, r: dict = r) -> str:
            return f"{r[f'{e}_accept_median_us']:.1f}" if e in engine_names else "-"

        print(
            f"{name:<26} {r['classes']:>5} | {q('plain'):>17} | {q('compressed'):>18} | {q('native'):>15} | "
            f"{a('plain')}/{a('compressed')}/{a('native')} | "
            f"{r['index_build_s']:.2f} / {r['trie_nodes']} / {r['index_cache_kb']:.0f} / {r['index_rss_mb']:.0f} / "
            f"{r['index_peak_mb']:.0f}",
            flush=True,
        )
    checks = []
    if args.check:
        with ProcessPoolExecutor(min(args.workers, len(names))) as pool:
            checks = list(pool.map(check, names, [args.tokenizer] * len(names)))
        for c in checks:
            print(
                f"check {c['grammar']:<26} {c['steps']} steps, {c['mismatches']} mismatches, {c['fallbacks']} fallbacks",
                flush=True,
            )
    machine = machine_info()
    load = os.getloadavg()[0]
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, xgrammar {machine['xgrammar']}, load average {load:.1f}; "
        f"{'CPU time of the timing thread' if args.cpu_time else 'wall time'}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "checks": checks,
                    "machine": machine,
                    "clock": "thread_time" if args.cpu_time else "perf_counter",
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
