"""Does XGrammar release the GIL while it fills a mask? Measured, not assumed.

    HF_HUB_OFFLINE=1 python benchmarks/gil_probe.py [--grammar c_like] [--seconds 1.5]

The main thread counts iterations of a tight Python loop (and, separately, times a run of
small torch matmuls) while a second thread runs, in a loop, one of:

- nothing (the baseline);
- ``hashlib.sha256`` over 8 MB, which releases the GIL (the control for "released");
- a pure-Python sum, which holds it (the control for "held");
- XGrammar's ``fill_next_token_bitmask`` for the compressed engine (class mask), and for the
  plain engine (whole vocabulary), half way through the grammar's longest sample document.

If fill releases the GIL, the main loop keeps about the baseline's rate beside it, like
beside the sha256 thread; if it held the GIL, the rate would drop like beside the
pure-Python thread. Also printed: how many fills the thread completed meanwhile against
alone. On a machine with fewer free cores than threads, every row drops: compare with the
sha256 row, not with the baseline. Never asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammar", default="c_like")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from cfgzip_lab.bench import machine_info, sample_docs
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    torch.set_num_threads(1)
    path = resolve_grammar(args.grammar)
    text = path.read_text(encoding="utf-8")
    vocab = load_vocab(args.tokenizer)
    classes = build_classes(compile_grammar(text), vocab).classes
    engines = compile_engines(text, vocab, classes)
    doc = max(sample_docs(path), key=len)
    tokens = [int(t) for t in vocab.encode(doc)]

    def positioned(matcher):
        for t in tokens[: len(tokens) // 2]:
            if not matcher.accept_token(t):
                break
        return matcher, matcher.allocate_bitmask(1)

    compressed, cbuf = positioned(engines.compressed())
    plain, pbuf = positioned(engines.plain())
    big = bytes(8 << 20)
    workloads = {
        "nothing": None,
        "sha256 (releases the GIL)": lambda: hashlib.sha256(big).digest(),
        "pure Python (holds the GIL)": lambda: sum(range(300_000)),
        "xgrammar fill, compressed": lambda: compressed.fill_next_token_bitmask(cbuf, 0),
        "xgrammar fill, plain": lambda: plain.fill_next_token_bitmask(pbuf, 0),
    }

    def rate_alone(op) -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.5:
            op()
            n += 1
        return n / (time.perf_counter() - t0)

    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def main_loop(seconds: float) -> tuple[float, float]:
        """Python loop iterations per second, then ms for 200 small matmuls."""
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            n += 1
        t0 = time.perf_counter()
        for _ in range(200):
            a @ b
        return n / seconds, (time.perf_counter() - t0) * 1e3

    rows = []
    for name, op in workloads.items():
        stop = threading.Event()
        done = [0]

        def work(op=op, stop=stop, done=done):
            while not stop.is_set():
                op()
                done[0] += 1

        alone = rate_alone(op) if op else None
        thread = threading.Thread(target=work) if op else None
        if thread:
            thread.start()
            time.sleep(0.05)
        d0, t0 = done[0], time.perf_counter()
        loop_rate, matmul_ms = main_loop(args.seconds)
        thread_rate = (done[0] - d0) / (time.perf_counter() - t0)
        stop.set()
        if thread:
            thread.join()
        rows.append(
            {
                "worker": name,
                "main_loop_per_s": loop_rate,
                "matmul_ms": matmul_ms,
                "worker_ops_per_s": thread_rate if op else None,
                "worker_ops_alone_per_s": alone,
            }
        )
    base = rows[0]
    print(
        f"GIL probe: {args.grammar}, {args.tokenizer} ({classes.num_classes} classes); main thread vs a worker thread"
    )
    print(f"{'worker thread runs':<30} {'main loop':>10} {'matmuls':>9} {'worker ops/s (alone)':>22}")
    for r in rows:
        ops = (
            "" if r["worker_ops_per_s"] is None else f"{r['worker_ops_per_s']:8.1f} ({r['worker_ops_alone_per_s']:.1f})"
        )
        print(
            f"{r['worker']:<30} {r['main_loop_per_s'] / base['main_loop_per_s']:>9.2f}x"
            f" {base['matmul_ms'] / r['matmul_ms']:>8.2f}x {ops:>22}"
        )
    m = machine_info()
    print(f"machine: {m['cpu']}, {m['cores']} cores, xgrammar {m['xgrammar']}, python {m['python']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "machine": m}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
