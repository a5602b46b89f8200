"""Speculative-decoding calls, the native matcher beside XGrammar's, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/spec_bench.py [--grammars json,c_like] [--tokenizer llama3]
        [--positions 24] [--ks 4,8,16] [--tree-nodes 64] [--repeats 3] [--json OUT]

A thin caller of :mod:`cfgzip_lab.spec_bench` (what is timed and compared is said there; the same
measurement is ``cfgzip-lab bench GRAMMAR --tokenizer T --spec``) over several bundled grammars,
each with its sample documents. Prints a table per grammar (p50 and p99 per call in microseconds,
XGrammar / native at the median, each call in native fills, the count of mask rows that differ),
then the machine. Never asserts on wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_GRAMMARS = ("json", "c_like")
DEFAULT_KS = (4, 8, 16)


def measure(name: str, tokenizer: str, settings) -> dict:
    """The bundled grammar ``name`` over ``tokenizer``, classed here, measured with its samples."""
    from cfgzip_lab.bench import sample_docs
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.spec_bench import measure_spec
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(tokenizer)
    path = resolve_grammar(name)
    compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
    classing = build_classes(compiled, vocab)
    engines = compile_engines(compiled.text, vocab, classing.classes)
    native = build_native_engine(compiled, vocab, classing.classes, classing=classing, xgrammar_engines=engines)
    return measure_spec(
        compiled,
        vocab,
        classing.classes,
        sample_docs(path),
        name=name,
        settings=settings,
        engines=engines,
        native_engine=native,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grammars", default=",".join(DEFAULT_GRAMMARS))
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--positions", type=int, default=24)
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)))
    parser.add_argument("--tree-nodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results (and the machine) here")
    args = parser.parse_args(argv)
    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.spec_bench import SpecSettings, spec_table

    settings = SpecSettings(
        positions=args.positions,
        ks=tuple(int(k) for k in args.ks.split(",")),
        tree_nodes=args.tree_nodes,
        repeats=args.repeats,
        seed=args.seed,
    )
    results = []
    for name in args.grammars.split(","):
        result = measure(name, args.tokenizer, settings)
        results.append(result)
        print(spec_table(result), flush=True)
        print(flush=True)
    machine = machine_info()
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, xgrammar {machine['xgrammar']}, "
        f"load average {os.getloadavg()[0]:.1f}; wall time (perf_counter)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "machine": machine}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
