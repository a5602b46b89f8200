"""The floor under an XGrammar-exact time to first mask, beside llguidance's whole one (issue 33).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ttfm_floor.py --names-file names.txt
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ttfm_floor.py --from-run artifacts/maskbench --sample 200

cfgzip's masks equal XGrammar's because its grammar is the one XGrammar builds, so a new JSON Schema's first
mask costs at least XGrammar's own calls the build makes: ``json.loads`` of the schema,
``Grammar.from_json_schema``, ``str(grammar)`` (the printed text spans and origins point into) and
``serialize_json()`` (the arrays the byte CFG is read from). This times those calls, llguidance's whole
compile (``maskbench.py``'s engine) and cfgzip's (``matcher_for``, disk cache off), file by file in one
process after two warm-up schemas, and prints each one's p50 and p90 in milliseconds (thread time: every one
of these calls runs on the calling thread; the collector paused, as ``matcher_for`` pauses it). Never asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402 (the benchmark's data reader and engines, beside this file)

COLUMNS = ("json.loads", "from_json_schema", "str(grammar)", "serialize_json", "XGrammar floor", "llguidance", "cfgzip")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names-file", type=Path, default=None, help="MaskBench names, one a line")
    ap.add_argument("--from-run", type=Path, default=None, help="a maskbench.py --out folder: its cfgzip files")
    ap.add_argument("--sample", type=int, default=0, help="with --from-run: this many of its files, at random")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    args = ap.parse_args(argv)
    import xgrammar

    import cfgzip_lab as cz
    from cfgzip_lab.bench import machine_info

    if args.names_file is not None:
        names = args.names_file.read_text().split()
    elif args.from_run is not None:
        names = sorted(p.stem for p in (args.from_run / "cfgzip").glob("*.json"))
        if args.sample:
            names = random.Random(args.seed).sample(names, min(args.sample, len(names)))
    else:
        ap.error("--names-file or --from-run")
    wanted = set(names)
    schemas = [
        json.dumps(r["schema"])
        for r in maskbench.read_maskbench(args.data)
        if r["name"].removesuffix(".json") in wanted
    ]
    vocab = cz.load_vocab(args.tokenizer)
    try:
        llguidance = maskbench._make_engine("llguidance", vocab)
    except ImportError:  # optional: its column is left out
        llguidance = None
    cfgzip = maskbench._make_engine("cfgzip", vocab)
    for warm in ('{"type": "object", "properties": {"a": {"type": "string"}}}', '{"type": "array"}'):
        for engine in (llguidance, cfgzip):
            if engine is not None:
                engine.compile(warm)
    gc.collect()
    gc.disable()  # what a server's build pays, without other work's collections landing in it
    gc.freeze()
    rows: dict[str, list[float]] = {c: [] for c in COLUMNS}
    clock = time.thread_time  # this process's own time: on a shared 2-core machine wall time is mostly others'
    for schema in schemas:
        try:
            t0 = clock()
            json.loads(schema)
            t1 = clock()
            grammar = xgrammar.Grammar.from_json_schema(schema)
            t2 = clock()
            str(grammar)
            t3 = clock()
            grammar.serialize_json()
            t4 = clock()
        except Exception:  # refused by XGrammar: nothing of ours to time either
            continue
        times = [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0]
        try:
            t5 = clock()
            llguidance.compile(schema)
            times.append(clock() - t5)
        except Exception:  # llguidance refuses it (or is not installed): no entry in its column
            times.append(None)
        t6 = clock()
        cfgzip.compile(schema)
        times.append(clock() - t6)
        for column, seconds in zip(COLUMNS, times):
            if seconds is not None:
                rows[column].append(seconds * 1000)
    print(
        f"machine: {machine_info()}, load {os.getloadavg()[0]:.2f}, tokenizer {args.tokenizer}, {len(schemas)} schemas"
    )
    print("| call | files | p50 ms | p90 ms |\n|---|---:|---:|---:|")
    for column, values in rows.items():
        if values:
            print(f"| {column} | {len(values)} | {quantile(values, 0.5):.3f} | {quantile(values, 0.9):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
