"""One sha256 per grammar over its byte CFG and its normal form, node for node: the referee of a change
that must leave the front end's output exactly as it was (issue 33's speed-ups of lifting, origins, the
PRODUCTIVE / REACHABLE passes).

    PYTHONPATH=/path/to/baseline HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/gnf_digest.py --out before.json
    HF_HUB_OFFLINE=1 nice .venv/bin/python benchmarks/gnf_digest.py --out after.json
    .venv/bin/python benchmarks/gnf_digest.py --compare before.json after.json      # exit 1 where any differs

(the baseline: a ``git worktree`` of the earlier commit with its extension built in place, first on the path.)

Hashed per grammar and store (the store the pipeline picks, and the Python ``WordStore``): the CFG (start,
rules in order, productions, byte sets, origins, symbol spans, counted repetitions, token macros) and the
GNF (names, start, accepts_empty, atoms, atom_of, the table's rows in order with their tails as store ids,
every store node in id order, origins, which are read so that lazily made ones are made, merged_from,
families, dead_atom, and each step's name and sizes). Grammars: a random MaskBench sample (``--sample``,
``--seed``) or the MaskBench schemas named (``--names``), and every bundled EBNF grammar. A grammar refused is recorded by its error's type and text, so
a refusal that changes is a difference too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import maskbench  # noqa: E402 (the benchmark's data reader, beside this file)


def cfg_key(cfg) -> list:
    """What the byte CFG is made of, as plain data (byte sets by their bits)."""
    rules = [
        (name, [tuple(s if isinstance(s, str) else ("B", s.bits) for s in rhs) for rhs in alts])
        for name, alts in cfg.rules.items()
    ]
    origins = [(name, repr(o)) for name, o in cfg.origins.items()]
    spans = [(name, repr(v)) for name, v in cfg.symbol_spans.items()]
    counted = [(name, repr(c)) for name, c in cfg.counted.items()]
    return [cfg.start, rules, origins, spans, counted, repr(cfg.tokens)]


def gnf_key(gnf) -> list:
    """What the normal form is made of, store node by store node."""
    store = gnf.store
    nodes = [(bool(store.accepts(i)), tuple(store.edges(i))) for i in range(len(store))]
    steps = [(s.name, s.nonterminals, s.dag_nodes, s.productions) for s in gnf.steps]
    return [
        gnf.names,
        gnf.start,
        gnf.accepts_empty,
        [a.bits for a in gnf.atoms],
        list(gnf.atom_of),
        [list(row.items()) for row in gnf.table],
        nodes,
        [repr(o) for o in gnf.origins],
        [list(m) for m in gnf.merged_from],
        [repr(f) for f in gnf.families],
        gnf.dead_atom,
        steps,
    ]


def digest(compiled) -> str:
    """sha256 of the CFG and the GNF of one :class:`~cfgzip_lab.pipeline.CompiledGrammar`."""
    return hashlib.sha256(repr([cfg_key(compiled.cfg), gnf_key(compiled.gnf)]).encode()).hexdigest()


def grammars(sample: int, seed: int, data: Path, names: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """``(name, text, kind)``: ``sample`` MaskBench schemas drawn with ``seed`` (or those ``names``d), then the
    bundled EBNF grammars."""
    import cfgzip_lab

    rows = list(maskbench.read_maskbench(data))
    if names:
        wanted = set(names)
        picked = [r for r in rows if r["name"].removesuffix(".json") in wanted]
        missing = wanted - {r["name"].removesuffix(".json") for r in picked}
        if missing:
            raise SystemExit(f"not in MaskBench: {', '.join(sorted(missing))}")
    else:
        picked = random.Random(seed).sample(rows, min(sample, len(rows)))
    out = [(r["name"].removesuffix(".json"), json.dumps(r["schema"]), "json_schema") for r in picked]
    for path in sorted((Path(cfgzip_lab.__file__).parent / "grammars").glob("*.ebnf")):
        out.append((path.stem, path.read_text(), "ebnf"))
    return out


def compare(before: Path, after: Path) -> int:
    """Print how many digests agree; 1 where any differs or a grammar is in one file only."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differ = [k for k in a if k in b and a[k] != b[k]]
    only = set(a) ^ set(b)
    print(
        f"{len(a)} / {len(b)} digests: {len(a) - len(differ) - len(set(a) - set(b))} equal, {len(differ)} differ, {len(only)} in one file only"
    )
    for key in differ[:20]:
        print(f"  differs: {key}")
    return 1 if differ or only else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write {grammar|store: digest} here")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--sample", type=int, default=300, help="MaskBench schemas (default 300)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--data", type=Path, default=maskbench.DATA)
    ap.add_argument("--names", nargs="+", default=(), help="these MaskBench schemas instead of a sample")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out or --compare")
    import cfgzip_lab
    from cfgzip_lab.pipeline import compile_grammar

    print(f"cfgzip_lab from {Path(cfgzip_lab.__file__).parent}", file=sys.stderr)
    out: dict[str, str] = {}
    for name, text, kind in grammars(args.sample, args.seed, args.data, args.names):
        for store in (None, False):
            key = f"{name}|{'default' if store is None else 'python'}"
            try:
                compiled = compile_grammar(text, kind=kind, compiled_store=store)
            except Exception as error:  # noqa: BLE001 (a refusal is recorded: it must not change either)
                out[key] = f"error {type(error).__name__}: {str(error)[:200]}"
                continue
            out[key] = digest(compiled)
    args.out.write_text(json.dumps(out, indent=0))
    print(f"{len(out)} digests in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
