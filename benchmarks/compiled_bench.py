"""Python reference vs compiled word store, side by side in one process, beside XGrammar's compile.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compiled_bench.py [--tokenizer llama3] [--export] [--json OUT] [GRAMMAR ...]

Per grammar (default: every bundled one), in this order and in this process:

* XGrammar: ``GrammarCompiler(cache_enabled=False).compile_grammar`` of the text (best of 2);
* the front end (EBNF → GNF, :func:`cfgzip_lab.pipeline.compile_grammar`), per path: the GNF is built
  in the path's word store (``compiled_store``);
* for each path (``python``: ``compute_classes(compiled=False)`` + the Python index and walk, what
  main ran before the compiled store; ``compiled``: the default): classing, the σ_in index and the
  native engine's construction, each in seconds, and the peak resident memory the three add
  (VmHWM reset through /proc/self/clear_refs before classing, so each path's own peak);
* the native engine of each path replayed over the bundled sample documents, every step timed on a
  fresh engine (memos cold at the start, as a new grammar's first request): the packed vocabulary
  mask (``vocab_row``: the class set and its row) and ``accept_token``, median and p90 in µs over
  the steps of two runs per path, in the order python, compiled, compiled, python (each run builds
  its engine again: classing, index, engine);
* ``--cpu-time``: stages in this process's CPU time (``time.process_time``) and steps in the timing
  thread's (``time.thread_time``), for a machine shared with other busy processes (wall time counts
  the waits); XGrammar's compile stays in wall time (it compiles on several threads);
* the vocabulary's byte trie (per vocabulary, kept across grammars) is built once before the first
  grammar and reported apart;
* ``--memory``: each path's peak resident memory again, each in a fresh process (in one process,
  freed memory is reused and a later path's peak hides under an earlier one's): VmHWM after classing,
  the index and the engine, minus VmRSS after loading the vocabulary and the grammar;
* ``--export``: what the other design (compiled classing re-interning its nodes into the Python
  WordStore, as ``classing._walk_parallel`` does for forked workers) would cost: every new node,
  and only the nodes reachable from the tokens' displacement nodes, made again in a WordStore.

Both paths must give the same classes and the same index (checked; a difference stops the run).
Prints a table and the machine (``uptime``'s load: the machine is shared); never asserts on wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _rss_mb(field: str = "VmRSS:") -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith(field))


def _xgrammar_compile_s(text: str, vocab) -> float:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(vocab.to_xgrammar(), cache_enabled=False)
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        compiler.compile_grammar(text)
        best = min(best, time.perf_counter() - t)
    return best


CLOCK = time.perf_counter  # stages; STEP_CLOCK for the replayed steps (--cpu-time: CPU clocks)
STEP_CLOCK = time.perf_counter


def _path(text: str, vocab, compiled: bool) -> dict:
    import numpy as np

    from cfgzip_lab.classes.classing import compute_classes
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.native.index import build_index
    from cfgzip_lab.pipeline import compile_grammar

    t = CLOCK()
    grammar = compile_grammar(text, compiled_store=compiled)
    front = CLOCK() - t
    peak_known = _reset_peak()
    base = _rss_mb()
    t0 = CLOCK()
    result = compute_classes(grammar.gnf, vocab.token_bytes, vocab.kinds, compiled=compiled)
    t1 = CLOCK()
    index = build_index(
        grammar.gnf, result.classes, vocab.token_bytes, token_node=result.token_node, displacer=result.displacer
    )
    t2 = CLOCK()
    engine = build_native_engine(grammar, vocab, result.classes, classing=result, index=index)
    t3 = CLOCK()
    peak = _rss_mb("VmHWM:") - base if peak_known else float("nan")
    return {
        "grammar": grammar,
        "result": result,
        "index": index,
        "engine": engine,
        "front_s": front,
        "classing_s": t1 - t0,
        "index_s": t2 - t1,
        "engine_s": t3 - t2,
        "peak_mb": peak,
        "class_of": np.asarray(result.classes.class_of),
    }


def _steps(engine, token_ids) -> dict[str, list[float]]:
    """Every step of the sample documents on a fresh matcher of ``engine`` (memos as it comes: cold
    for a new engine): the packed vocabulary mask (the class set, then its row) and ``accept_token``."""
    clock = STEP_CLOCK
    out: dict[str, list[float]] = {"mask": [], "accept": []}
    for ids in token_ids:
        m = engine.matcher()
        for t in ids:
            t0 = clock()
            m.vocab_row()
            t1 = clock()
            ok = m.accept_token(t)
            t2 = clock()
            out["mask"].append(t1 - t0)
            out["accept"].append(t2 - t1)
            if not ok:
                break
    if engine.fallbacks:
        raise SystemExit(
            f"{engine.compiled.text[:30]!r}: a request fell back to XGrammar; the timings would mix engines"
        )
    return out


def _quantiles(xs: list[float]) -> tuple[float, float]:
    import numpy as np

    return float(np.median(xs) * 1e6), float(np.percentile(xs, 90) * 1e6)


def _export_s(python_store, compiled_result) -> dict:
    """Seconds to make the compiled store's new nodes again in a copy of the GNF's Python store."""
    from cfgzip_lab.grammar.words import WordStore

    cs = compiled_result.displacer.store
    out = {}
    for label, nodes in (
        ("all", range(len(python_store), len(cs))),
        ("reachable", sorted(cs.reachable(int(n) for n in set(compiled_result.token_node.tolist()) if n > 1))),
    ):
        store = WordStore()
        store.nodes = list(python_store.nodes)
        store._index = dict(python_store._index)
        ids: dict[int, int] = {}
        t = time.perf_counter()
        for node in nodes:
            if node < len(python_store):
                continue
            accepts, edges = cs.nodes[node]
            ids[node] = store.make(accepts, tuple((s, ids.get(c, c)) for s, c in edges))
        out[f"export_{label}_s"] = time.perf_counter() - t
        out[f"export_{label}_nodes"] = len(ids)
    return out


def _peak_in_fresh_process(name: str, tokenizer: str, compiled: bool) -> float:
    """MB: a fresh process's peak while classing, indexing and building the engine, above its size
    once the vocabulary is loaded and the grammar compiled."""
    import subprocess

    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from benchmarks.compiled_bench import _rss_mb, _reset_peak\n"
        "from cfgzip_lab.classes.classing import compute_classes\n"
        "from cfgzip_lab.native import build_native_engine\n"
        "from cfgzip_lab.vocab_trie import vocab_trie\n"
        "from cfgzip_lab.pipeline import compile_grammar, resolve_grammar\n"
        "from cfgzip_lab.vocab_sources import load_vocab\n"
        f"v = load_vocab({tokenizer!r}); g = compile_grammar(resolve_grammar({name!r}).read_text(encoding='utf-8'))\n"
        "vocab_trie(v.token_bytes, v.kinds)\n"
        "_reset_peak(); base = _rss_mb()\n"
        f"r = compute_classes(g.gnf, v.token_bytes, v.kinds, compiled={compiled!r})\n"
        "e = build_native_engine(g, v, r.classes, classing=r)\n"
        "print(_rss_mb('VmHWM:') - base)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return float(proc.stdout.strip().splitlines()[-1])


def _vocab_trie_s(tokenizer: str) -> float:
    from cfgzip_lab.vocab_sources import load_vocab
    from cfgzip_lab.vocab_trie import vocab_trie

    vocab = load_vocab(tokenizer)
    t = CLOCK()
    vocab_trie(vocab.token_bytes, vocab.kinds)
    return CLOCK() - t


def measure(name: str, tokenizer: str, export: bool, memory: bool = False) -> dict:
    import numpy as np

    from cfgzip_lab.bundled import bundled_samples
    from cfgzip_lab.pipeline import compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(tokenizer)
    path = resolve_grammar(name)
    text = path.read_text(encoding="utf-8")
    docs = [p.read_text(encoding="utf-8") for p in bundled_samples(path)]
    row = {"grammar": name, "tokenizer": vocab.name, "xgrammar_compile_s": _xgrammar_compile_s(text, vocab)}
    token_ids = [vocab.encode(d) for d in docs]
    paths, steps = {}, {"python": {"mask": [], "accept": []}, "compiled": {"mask": [], "accept": []}}
    for label in ("python", "compiled", "compiled", "python"):
        p = _path(text, vocab, label == "compiled")
        for key, xs in _steps(p["engine"], token_ids).items():
            steps[label][key] += xs
        if label in paths:
            continue  # the second run: its steps only
        paths[label] = p
        row[f"{label}_classing_s"] = p["classing_s"]
        row[f"{label}_index_s"] = p["index_s"]
        row[f"{label}_engine_s"] = p["engine_s"]
        row[f"{label}_peak_mb"] = p["peak_mb"]
        row[f"{label}_front_s"] = p["front_s"]
    a, b = paths["python"], paths["compiled"]
    x, y = a["index"].to_arrays(), b["index"].to_arrays()
    same = (
        np.array_equal(a["class_of"], b["class_of"])
        and x.keys() == y.keys()
        and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x)
    )
    if not same:
        raise SystemExit(f"{name}: the compiled path's classes or index differ from the Python path's")
    row["classes"] = b["result"].classes.num_classes
    row["dag_nodes"] = len(b["result"].displacer.store)
    row["steps"] = len(steps["compiled"]["mask"]) // 2
    if export:
        row.update(_export_s(compile_grammar(text, compiled_store=False).gnf.store, b["result"]))
    if memory:
        for label in ("python", "compiled"):
            row[f"{label}_peak_mb"] = _peak_in_fresh_process(name, tokenizer, label == "compiled")
    for label in ("python", "compiled"):
        for key in ("mask", "accept"):
            row[f"{label}_{key}_median_us"], row[f"{label}_{key}_p90_us"] = _quantiles(steps[label][key])
    return row


def main() -> int:
    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.bundled import bundled_grammars

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grammars", nargs="*")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--export", action="store_true", help="also time re-interning the compiled nodes in Python")
    ap.add_argument("--cpu-time", action="store_true", help="stages in process CPU time, steps in thread CPU time")
    ap.add_argument("--memory", action="store_true", help="peak memory of each path in a fresh process")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    global CLOCK, STEP_CLOCK
    if args.cpu_time:
        CLOCK, STEP_CLOCK = time.process_time, time.thread_time
    names = args.grammars or list(bundled_grammars())
    load_before = os.getloadavg()
    rows = []
    trie_s = _vocab_trie_s(args.tokenizer)
    print(
        f"{'grammar':<26} {'xgr s':>6} {'front s py/c':>12} | {'classing s py/c (x)':>21} | {'index s py/c (x)':>20} | "
        f"{'engine s py/c':>13} | {'peak MB py/c':>12} | {'accept µs med/p90 py -> c':>27} | "
        f"{'mask µs med/p90 py -> c':>27}",
        flush=True,
    )
    for name in names:
        r = measure(name, args.tokenizer, args.export, args.memory)
        rows.append(r)
        print(
            f"{name:<26} {r['xgrammar_compile_s']:>6.3f} {r['python_front_s']:>5.3f}/{r['compiled_front_s']:<6.3f} | "
            f"{r['python_classing_s']:>6.3f}/{r['compiled_classing_s']:.3f} ({r['python_classing_s'] / r['compiled_classing_s']:>4.0f}x) | "
            f"{r['python_index_s']:>5.3f}/{r['compiled_index_s']:.4f} ({r['python_index_s'] / r['compiled_index_s']:>4.0f}x) | "
            f"{r['python_engine_s']:.3f}/{r['compiled_engine_s']:.3f} | "
            f"{r['python_peak_mb']:>5.0f}/{r['compiled_peak_mb']:<5.0f} | "
            f"{r['python_accept_median_us']:5.1f}/{r['python_accept_p90_us']:<5.1f} -> "
            f"{r['compiled_accept_median_us']:4.1f}/{r['compiled_accept_p90_us']:<5.1f} | "
            f"{r['python_mask_median_us']:5.1f}/{r['python_mask_p90_us']:<5.1f} -> "
            f"{r['compiled_mask_median_us']:4.1f}/{r['compiled_mask_p90_us']:<5.1f}",
            flush=True,
        )
        if args.export:
            print(
                f"{'':<26} export to the Python store: all {r['export_all_nodes']:,} new nodes "
                f"{r['export_all_s']:.3f} s, reachable from tokens {r['export_reachable_nodes']:,} "
                f"{r['export_reachable_s']:.3f} s (compiled classing {r['compiled_classing_s']:.3f} s)",
                flush=True,
            )
    machine = machine_info()
    print(f"vocabulary byte trie ({args.tokenizer}, built once per vocabulary and process): {trie_s:.3f} s")
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, xgrammar {machine['xgrammar']}; load average "
        f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after (1-minute); "
        f"{'CPU time' if args.cpu_time else 'wall time'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "machine": machine}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
