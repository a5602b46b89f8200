"""Speculative-decoding calls, the native matcher beside XGrammar's, in one process.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/spec_bench.py [--grammars json,c_like] [--tokenizer llama3]
        [--positions 24] [--ks 4,8,16] [--tree-nodes 64] [--repeats 3] [--json OUT]

Per grammar (bundled, with its sample documents tokenized) both matchers are brought to the same
prefix at ``--positions`` points spread over the documents: the native ``DisplacementMatcher`` and
``xgrammar.GrammarMatcher`` over the whole vocabulary (``CompiledEngines.plain``). At each point,
``--repeats`` times each, it times:

- ``fill``: one full-vocabulary mask (the unit the others are measured in);
- ``fork``: an independent matcher in the same state (native: copy-on-write; XGrammar: ``fork()``);
- ``draft kK``: masks for the K positions of a linear draft (the next K tokens of the document)
  plus the bonus row, the state left as it was: native ``fill_draft_bitmasks`` in one call;
  XGrammar has no such call, so the same by hand (fill, ``accept_token``, ..., ``rollback(K)``);
- ``tree N``: ``traverse_draft_tree`` over an N-node draft tree, each engine's own: the document's
  next tokens as a chain (up to 8 deep) whose every level also holds leaf siblings, tokens the
  grammar allows there (seeded), until N nodes.

Every mask row of the draft fills and the trees is compared between the engines, bit for bit below
the vocabulary size (XGrammar's bits past it are not defined), and the count of differing rows is
printed. Prints p50 and p99 per call in microseconds, the ratio XGrammar / native at the median and
``N x fill``, what N single native fills would cost, beside the tree; then the machine. Never
asserts on wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_GRAMMARS = ("json", "c_like")
DEFAULT_KS = (4, 8, 16)


def _positions(paths: list[list[int]], count: int, horizon: int) -> list[tuple[int, int]]:
    """(document, offset) pairs spread evenly over every offset that leaves ``horizon`` tokens after it."""
    spots = [(d, i) for d, path in enumerate(paths) for i in range(max(0, len(path) - horizon))]
    if not spots:  # documents shorter than the horizon: every offset
        spots = [(d, i) for d, path in enumerate(paths) for i in range(len(path))]
    if len(spots) <= count:
        return spots
    return [spots[int(j)] for j in np.linspace(0, len(spots) - 1, count)]


def _tree(
    native, chain: list[int], nodes: int, size: int, stops: set[int], rng
) -> tuple[list[int], list[int], list[int]]:
    """(next_token, next_sibling, draft_tokens) of an ``nodes``-node tree: root, then ``chain`` as
    first children, each level padded with leaf siblings the grammar allows there."""
    depth = max(1, min(8, len(chain)))
    chain = chain[:depth]
    per_level = max(1, (nodes - 1) // depth)
    parent, token = [-1], [chain[0] if chain else 0]  # the root's token is not accepted again
    probe = native.fork()
    level_parent = 0
    for level in range(depth):
        mask = probe.next_vocab_bitmask().numpy().view(np.uint32)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:size]
        allowed = [t for t in np.flatnonzero(bits).tolist() if t not in stops and t != chain[level]]
        extra = per_level - 1 if level < depth - 1 else nodes - len(parent) - 1
        picks = rng.choice(allowed, size=min(max(extra, 0), len(allowed)), replace=False).tolist() if allowed else []
        first = len(parent)
        for t in [chain[level]] + picks:
            parent.append(level_parent)
            token.append(int(t))
        level_parent = first
        if not probe.accept_token(chain[level]) or probe.is_terminated():
            break
    nxt, sib = [-1] * len(parent), [-1] * len(parent)
    last_child: dict[int, int] = {}
    for node in range(1, len(parent)):
        p = parent[node]
        if p in last_child:
            sib[last_child[p]] = node
        else:
            nxt[p] = node
        last_child[p] = node
    return nxt, sib, token


def _us(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples, dtype=np.float64) * 1e6
    return {"p50_us": float(np.median(a)), "p99_us": float(np.percentile(a, 99)), "n": int(a.size)}


def _rows_differ(ours: np.ndarray, theirs: np.ndarray, vocab_size: int) -> int:
    """Rows of two packed bitmasks that differ below ``vocab_size``."""
    ours, theirs = ours.view(np.uint32).copy(), theirs.view(np.uint32).copy()
    if vocab_size % 32:
        keep = np.uint32((1 << (vocab_size % 32)) - 1)
        ours[:, -1] &= keep
        theirs[:, -1] &= keep
    return int((ours != theirs).any(axis=1).sum())


def measure(
    name: str,
    tokenizer: str,
    *,
    positions: int,
    ks: tuple[int, ...],
    tree_nodes: int,
    repeats: int,
    seed: int = 0,
) -> dict:
    import torch
    import xgrammar as xgr

    from cfgzip_lab.bench import sample_docs, token_paths
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(tokenizer)
    path = resolve_grammar(name)
    compiled = compile_grammar(path.read_text(encoding="utf-8"), source=str(path))
    classing = build_classes(compiled, vocab)
    engines = compile_engines(compiled.text, vocab, classing.classes)
    native_engine = build_native_engine(compiled, vocab, classing.classes, classing=classing, xgrammar_engines=engines)
    paths = token_paths(engines, sample_docs(path), seed=seed)
    size = vocab.vocab_size
    stops = {int(s) for s in vocab.stop_ids}
    horizon = max(max(ks), 8)
    rng = np.random.default_rng(seed)
    clock = time.perf_counter
    times: dict[str, list[float]] = {}
    differing, compared = 0, 0
    spots = _positions(paths, positions, horizon)

    def timed(key: str, call) -> object:
        t0 = clock()
        out = call()
        times.setdefault(key, []).append(clock() - t0)
        return out

    for doc, offset in spots:
        ours = native_engine.matcher()
        theirs = engines.plain().xgrammar_matcher
        prefix = paths[doc][:offset]
        for t in prefix:
            if not (ours.accept_token(t) and theirs.accept_token(t)):
                raise RuntimeError(f"{name}: the engines disagree on token {t} at {offset} of document {doc}")
        rest = paths[doc][offset:]
        one = xgr.allocate_token_bitmask(1, size)
        for _ in range(repeats):
            timed("fill/native", lambda: ours.fill_next_token_bitmask(one, 0))
            timed("fill/xgrammar", lambda: theirs.fill_next_token_bitmask(one, 0))
            timed("fork/native", ours.fork)
            timed("fork/xgrammar", theirs.fork)
        for k in ks:
            draft = rest[:k]
            mine = xgr.allocate_token_bitmask(k + 1, size)
            ref = xgr.allocate_token_bitmask(k + 1, size)

            def by_hand(draft=draft, ref=ref) -> int:
                accepted = 0
                for i in range(len(draft) + 1):
                    theirs.fill_next_token_bitmask(ref, i)
                    if i == len(draft) or not theirs.accept_token(draft[i]):
                        break
                    accepted += 1
                theirs.rollback(accepted)
                return accepted + 1

            for _ in range(repeats):
                filled = timed(
                    f"draft k{k}/native", lambda draft=draft, mine=mine: ours.fill_draft_bitmasks(draft, mine)
                )
                filled_ref = timed(f"draft k{k}/xgrammar", by_hand)
            if filled != filled_ref:
                raise RuntimeError(f"{name}: draft of {k} filled {filled} rows natively, {filled_ref} by XGrammar")
            differing += _rows_differ(mine.numpy()[:filled], ref.numpy()[:filled], size)
            compared += filled
        nxt, sib, tok = (torch.tensor(v, dtype=torch.int64) for v in _tree(ours, rest, tree_nodes, size, stops, rng))
        n = nxt.shape[0]
        mine = xgr.allocate_token_bitmask(n, size)
        ref = xgr.allocate_token_bitmask(n, size)
        for _ in range(repeats):
            timed(f"tree {tree_nodes}/native", lambda: ours.traverse_draft_tree(nxt, sib, tok, mine))
            timed(f"tree {tree_nodes}/xgrammar", lambda: theirs.traverse_draft_tree(nxt, sib, tok, ref))
        differing += _rows_differ(mine.numpy(), ref.numpy(), size)
        compared += n
    ops = {}
    for key, samples in times.items():
        op, engine = key.rsplit("/", 1)
        ops.setdefault(op, {})[engine] = _us(samples)
    return {
        "grammar": name,
        "tokenizer": vocab.name,
        "vocab_size": size,
        "classes": classing.classes.num_classes,
        "positions": len(spots),
        "repeats": repeats,
        "tree_nodes": tree_nodes,
        "ops": ops,
        "compared_rows": compared,
        "differing_rows": differing,
    }


def table(result: dict) -> str:
    fill = result["ops"]["fill"]["native"]["p50_us"]
    lines = [
        f"### {result['grammar']} ({result['tokenizer']}, {result['vocab_size']:,} ids, {result['classes']} classes; "
        f"{result['positions']} positions x {result['repeats']})",
        "",
        "| call | native p50 µs | native p99 µs | XGrammar p50 µs | XGrammar p99 µs | XGrammar / native | native in fills |",
        "|---|---|---|---|---|---|---|",
    ]
    for op, by in result["ops"].items():
        ours, theirs = by["native"], by["xgrammar"]
        ratio = theirs["p50_us"] / ours["p50_us"] if ours["p50_us"] > 0 else float("inf")
        lines.append(
            f"| {op} | {ours['p50_us']:.1f} | {ours['p99_us']:.1f} | {theirs['p50_us']:.1f} | {theirs['p99_us']:.1f} "
            f"| {ratio:.2f}x | {ours['p50_us'] / fill:.1f} |"
        )
    lines.append("")
    lines.append(
        f"masks compared: {result['compared_rows']} rows, {result['differing_rows']} differ; "
        f"{result['tree_nodes']} single native fills would take {result['tree_nodes'] * fill:.0f} µs at the median"
    )
    return "\n".join(lines)


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

    ks = tuple(int(k) for k in args.ks.split(","))
    results = []
    for name in args.grammars.split(","):
        result = measure(
            name,
            args.tokenizer,
            positions=args.positions,
            ks=ks,
            tree_nodes=args.tree_nodes,
            repeats=args.repeats,
            seed=args.seed,
        )
        results.append(result)
        print(table(result), flush=True)
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
