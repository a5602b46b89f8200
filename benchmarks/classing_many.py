"""Classing of many different JSON Schemas, each once, in one process (issue 33): what a server classing a
stream of new schemas pays per schema, with the per-vocabulary state (the trie, classing's scan cache)
carried from one schema to the next, as ``matcher_for`` carries it.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/classing_many.py --from-run artifacts/mb60 [--json out.json]
    PYTHONPATH=/tmp/base HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/classing_many.py --from-run ...  # before

``--from-run`` takes the files of a ``benchmarks/maskbench.py`` run (its ``cfgzip`` results), ``--names``
MaskBench names. Each schema is compiled, then ``build_classes`` timed in thread time (what this process
ran, not what other sessions on the machine took from it); a schema whose normal form takes longer than
``--gnf-seconds`` is left out (the Python-store tail, not classing). ``--ttfm`` times instead what
``maskbench.py`` calls the time to first mask: ``matcher_for`` with the disk cache off and the first
``fill_next_token_bitmask`` (thread time too; the digest is then the first mask's). Prints the machine, the median and sum,
the vocabulary trie's scan-cache counts, and with ``--json`` writes each file's time and class digest (two
runs, before and after, must give the same digests). Never asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402 (the benchmark's data reader, beside this file)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-run", type=Path, default=None, help="a maskbench.py --out folder")
    ap.add_argument("--names", nargs="+", default=None, help="MaskBench names instead")
    ap.add_argument("--gnf-seconds", type=float, default=2.0)
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    ap.add_argument("--json", type=Path, default=None, help="each file's ms and class digest")
    ap.add_argument("--ttfm", action="store_true", help="time matcher_for and the first mask instead")
    args = ap.parse_args(argv)
    import cfgzip_lab as cz
    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    if args.from_run is not None:
        names = sorted(p.stem for p in (args.from_run / "cfgzip").glob("*.json"))
    elif args.names:
        names = [n.removesuffix(".json") for n in args.names]
    else:
        ap.error("--from-run or --names")
    wanted = set(names)
    schemas = {
        r["name"].removesuffix(".json"): json.dumps(r["schema"])
        for r in maskbench.read_maskbench(args.data)
        if r["name"].removesuffix(".json") in wanted
    }
    vocab = cz.load_vocab(args.tokenizer)
    for warm in ('{"type": "object", "properties": {"a": {"type": "string"}}}', '{"type": "array"}'):
        build_classes(compile_grammar(warm, kind="json_schema"), vocab)  # first-use imports, the trie
    print(
        f"machine: {machine_info()}, load {os.getloadavg()[0]:.2f}, tokenizer {args.tokenizer}, cfgzip_lab {cz.__file__}"
    )
    out: dict[str, dict] = {}
    gc.disable()  # as matcher_for's build does (cfgzip_lab._gc)
    try:
        for name in names:
            if name not in schemas:
                continue
            try:
                compiled = compile_grammar(schemas[name], kind="json_schema")
            except Exception:  # refused by the front end: nothing to class
                continue
            if compiled.seconds.get("gnf", 0.0) > args.gnf_seconds:
                continue
            if args.ttfm:
                t0 = time.thread_time()
                matcher = cz.matcher_for(
                    schemas[name], vocab, kind="json_schema", cache=cz.GrammarCache(cache_dir=False)
                )
                bitmask = matcher.allocate_bitmask(1)
                matcher.fill_next_token_bitmask(bitmask)
                ms = (time.thread_time() - t0) * 1000
                digest = hashlib.sha256(bitmask.numpy().tobytes()).hexdigest()[:16]
                out[name] = {"ms": round(ms, 4), "digest": digest}
                del matcher, compiled
            else:
                t0 = time.thread_time()
                result = build_classes(compiled, vocab)
                ms = (time.thread_time() - t0) * 1000
                digest = result.classes.digest()[:16]
                out[name] = {"ms": round(ms, 4), "digest": digest, "classes": result.classes.num_classes}
                del result, compiled
            gc.collect()
    finally:
        gc.enable()
    times = [r["ms"] for r in out.values()]
    info = {k: v for k, v in vocab.byte_trie.info().items() if k.startswith("scans")}
    what = "first masks" if args.ttfm else "files classed once each"
    print(f"{len(times)} {what}: median {statistics.median(times):.3f} ms, sum {sum(times):.1f} ms")
    print(f"scan cache: {info}")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"files": out, "scan_cache": info}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
