"""Which MaskBench schemas XGrammar itself must serve because its lookahead misreads a repeated class.

    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/lookahead_scan.py                 # all 10,282
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/lookahead_scan.py --limit 500     # the first 500
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/lookahead_scan.py --name o79409   # names holding it

For each schema: XGrammar's EBNF (``from_json_schema``, any whitespace, strict, as cfgzip serves it),
then :func:`~cfgzip_lab.grammar.large_repeat.large_repeat_in_text` without a vocabulary (every class
repeated past 128 counts) and with one (only a class the vocabulary holds a misread token for,
:mod:`cfgzip_lab.grammar.lookahead_reading`). Prints both counts, the schemas the second finds, and the
second scan's cost (mean, p50, p99, max: the first use of a vocabulary and of each class pays once).
Never asserts on time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "maskbench" / "maskbench.jsonl.gz"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="llama3")
    parser.add_argument("--limit", type=int, default=None, help="only the first N schemas")
    parser.add_argument("--name", action="append", default=[], help="only schemas whose name holds this (repeatable)")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)

    import xgrammar as xgr

    import cfgzip_lab as cz
    from cfgzip_lab.grammar.large_repeat import large_repeat_in_text

    vocab = cz.load_vocab(args.vocab)
    files = unconverted = text_only = 0
    found: list[tuple[str, str]] = []
    seconds: list[float] = []
    with gzip.open(args.data, "rt", encoding="utf-8") as rows:
        for line in rows:
            if args.limit is not None and files >= args.limit:
                break
            row = json.loads(line)
            if args.name and not any(part in row["name"] for part in args.name):
                continue
            files += 1
            schema = row["schema"] if isinstance(row["schema"], str) else json.dumps(row["schema"])
            try:
                text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=True))
            except Exception:  # XGrammar refuses the schema: nobody serves it
                unconverted += 1
                continue
            text_only += large_repeat_in_text(text) is not None
            t0 = time.perf_counter()
            hit = large_repeat_in_text(text, vocab)
            seconds.append(time.perf_counter() - t0)
            if hit is not None:
                found.append((row["name"], f"line {hit.line}, column {hit.column}"))
    ms = np.array(seconds) * 1e3
    print(f"{files} schemas ({unconverted} refused by XGrammar), vocabulary {vocab.name!r}")
    print(f"a class repeated past 128 (text scan): {text_only}; misread in this vocabulary: {len(found)}")
    for name, where in found:
        print(f"  {name}: {where}")
    if ms.size:
        print(
            f"scan with the vocabulary: mean {ms.mean():.3f} ms, p50 {np.median(ms):.3f}, "
            f"p99 {np.percentile(ms, 99):.2f}, max {ms.max():.1f}"
        )


if __name__ == "__main__":
    main()
