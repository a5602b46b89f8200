"""Speculative-decoding calls, the native matcher beside XGrammar's, in one process.

Behind ``cfgzip-lab bench --spec`` and ``benchmarks/spec_bench.py``. For one grammar, both matchers
are brought to the same prefix at ``positions`` points spread over the token paths of its
documents: the native :class:`~cfgzip_lab.native.matcher.DisplacementMatcher` and
``xgrammar.GrammarMatcher`` over the whole vocabulary (``CompiledEngines.plain``). At each point,
``repeats`` times each, :func:`measure_spec` times:

- ``fill``: one full-vocabulary mask (the unit the others are measured in);
- ``fork``: an independent matcher in the same state (native: copy-on-write; XGrammar: ``fork()``);
- ``draft kK``: masks for the K positions of a linear draft (the next K tokens of the document)
  plus the bonus row, the state left as it was: native ``fill_draft_bitmasks`` in one call;
  XGrammar has no such call, so the same by hand (fill, ``accept_token``, ..., ``rollback(K)``);
- ``tree N``: ``traverse_draft_tree`` over an N-node draft tree, each engine's own: the document's
  next tokens as a chain (up to 8 deep) whose every level also holds leaf siblings, tokens the
  grammar allows there (seeded), until N nodes.

Every mask row of the draft fills and the trees is compared between the engines, bit for bit below
the vocabulary size (XGrammar's bits past it are not defined), and the differing rows are counted.
:func:`spec_table` prints p50 and p99 per call in microseconds, the ratio XGrammar / native at the
median and each call in native fills. Nothing here asserts on wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .classes.classing import TokenClasses
    from .engine import CompiledEngines
    from .native.engine import NativeEngine
    from .native.matcher import DisplacementMatcher
    from .pipeline import CompiledGrammar
    from .vocab import VocabTable

__all__ = ["SpecSettings", "measure_spec", "spec_table"]

_MAX_TREE_DEPTH = 8


@dataclass(frozen=True)
class SpecSettings:
    """What :func:`measure_spec` times.

    Parameters
    ----------
    positions
        Prefixes (points of the documents) at which every call is timed.
    ks
        Lengths of the linear drafts (``draft kK``).
    tree_nodes
        Nodes of the draft tree (``tree N``).
    repeats
        Times each call is timed at each position.
    seed
        Seed of the random walks (a grammar without documents) and of the trees' leaf siblings.
    """

    positions: int = 24
    ks: tuple[int, ...] = (4, 8, 16)
    tree_nodes: int = 64
    repeats: int = 3
    seed: int = 0


def spread_positions(paths: Sequence[Sequence[int]], count: int, horizon: int) -> list[tuple[int, int]]:
    """(document, offset) pairs spread evenly over every offset that leaves ``horizon`` tokens after it."""
    spots = [(d, i) for d, path in enumerate(paths) for i in range(max(0, len(path) - horizon))]
    if not spots:  # documents shorter than the horizon: every offset
        spots = [(d, i) for d, path in enumerate(paths) for i in range(len(path))]
    if len(spots) <= count:
        return spots
    return [spots[int(j)] for j in np.linspace(0, len(spots) - 1, count)]


def draft_tree(
    native: DisplacementMatcher, chain: Sequence[int], nodes: int, vocab_size: int, stops: set[int], rng
) -> tuple[list[int], list[int], list[int]]:
    """(next_token, next_sibling, draft_tokens) of a tree of about ``nodes`` nodes: the root, then
    ``chain`` as first children (up to 8 deep), each level padded with leaf siblings the grammar
    allows there. ``native`` is left as it was (a fork walks the chain)."""
    depth = max(1, min(_MAX_TREE_DEPTH, len(chain)))
    chain = list(chain[:depth])
    per_level = max(1, (nodes - 1) // depth)
    parent, token = [-1], [chain[0] if chain else 0]  # the root's token is not accepted again
    probe = native.fork()
    level_parent = 0
    for level in range(min(depth, len(chain))):
        mask = probe.next_vocab_bitmask().numpy().view(np.uint32)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size]
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
    next_token, next_sibling = [-1] * len(parent), [-1] * len(parent)
    last_child: dict[int, int] = {}
    for node in range(1, len(parent)):
        p = parent[node]
        if p in last_child:
            next_sibling[last_child[p]] = node
        else:
            next_token[p] = node
        last_child[p] = node
    return next_token, next_sibling, token


def quantiles_us(samples: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of ``samples`` (seconds) in microseconds, and their count."""
    a = np.asarray(samples, dtype=np.float64) * 1e6
    return {"p50_us": float(np.median(a)), "p99_us": float(np.percentile(a, 99)), "n": int(a.size)}


def rows_differ(ours: np.ndarray, theirs: np.ndarray, vocab_size: int) -> int:
    """Rows of two packed bitmasks that differ below ``vocab_size``."""
    ours, theirs = ours.view(np.uint32).copy(), theirs.view(np.uint32).copy()
    if vocab_size % 32:
        keep = np.uint32((1 << (vocab_size % 32)) - 1)
        ours[:, -1] &= keep
        theirs[:, -1] &= keep
    return int((ours != theirs).any(axis=1).sum())


def _fill_draft_by_hand(matcher: Any, draft: Sequence[int], bitmask) -> int:
    """XGrammar's way to the rows of a linear draft: fill, accept, ..., then roll back. Rows filled."""
    accepted = 0
    for i in range(len(draft) + 1):
        matcher.fill_next_token_bitmask(bitmask, i)
        if i == len(draft) or not matcher.accept_token(draft[i]):
            break
        accepted += 1
    matcher.rollback(accepted)
    return accepted + 1


class _Clock:
    """Samples per (call, engine), seconds."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def time(self, key: str, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        out = call()
        self.samples.setdefault(key, []).append(time.perf_counter() - started)
        return out

    def by_call(self) -> dict[str, dict[str, dict[str, float]]]:
        ops: dict[str, dict[str, dict[str, float]]] = {}
        for key, samples in self.samples.items():
            op, engine = key.rsplit("/", 1)
            ops.setdefault(op, {})[engine] = quantiles_us(samples)
        return ops


def measure_spec(
    compiled: CompiledGrammar,
    vocab: VocabTable,
    classes: TokenClasses,
    docs: Sequence[str],
    *,
    name: str,
    settings: SpecSettings = SpecSettings(),
    engines: CompiledEngines | None = None,
    native_engine: NativeEngine | None = None,
) -> dict[str, Any]:
    """Time the speculative-decoding calls of both matchers at ``settings.positions`` prefixes of
    ``docs`` (random walks when there are none) and compare every mask row they fill.

    Returns
    -------
    dict
        ``grammar``, ``tokenizer``, ``vocab_size``, ``classes``, ``positions``, ``repeats``,
        ``tree_nodes``, ``ops`` (call → engine → ``p50_us`` / ``p99_us`` / ``n``), ``compared_rows``
        and ``differing_rows`` (0 when every mask agreed).

    Raises
    ------
    RuntimeError
        The engines disagree on a token of a document, or on how many rows a draft fills.
    """
    import torch
    import xgrammar as xgr

    from .bench import token_paths
    from .engine import compile_engines
    from .native import build_native_engine

    engines = engines or compile_engines(compiled.text, vocab, classes)
    native_engine = native_engine or build_native_engine(compiled, vocab, classes, xgrammar_engines=engines)
    paths = token_paths(engines, list(docs), seed=settings.seed)
    size = vocab.vocab_size
    stops = {int(s) for s in vocab.stop_ids}
    rng = np.random.default_rng(settings.seed)
    clock = _Clock()
    differing = compared = 0
    spots = spread_positions(paths, settings.positions, max(max(settings.ks), _MAX_TREE_DEPTH))
    for doc, offset in spots:
        ours = native_engine.matcher()
        theirs = engines.plain().xgrammar_matcher
        for t in paths[doc][:offset]:
            if not (ours.accept_token(t) and theirs.accept_token(t)):
                raise RuntimeError(f"{name}: the engines disagree on token {t} at {offset} of document {doc}")
        rest = paths[doc][offset:]
        one = xgr.allocate_token_bitmask(1, size)
        for _ in range(settings.repeats):
            clock.time("fill/native", lambda: ours.fill_next_token_bitmask(one, 0))
            clock.time("fill/xgrammar", lambda: theirs.fill_next_token_bitmask(one, 0))
            clock.time("fork/native", ours.fork)
            clock.time("fork/xgrammar", theirs.fork)
        for k in settings.ks:
            draft = rest[:k]
            mine, ref = xgr.allocate_token_bitmask(k + 1, size), xgr.allocate_token_bitmask(k + 1, size)
            for _ in range(settings.repeats):
                filled = clock.time(f"draft k{k}/native", lambda: ours.fill_draft_bitmasks(draft, mine))
                filled_ref = clock.time(f"draft k{k}/xgrammar", lambda: _fill_draft_by_hand(theirs, draft, ref))
            if filled != filled_ref:
                raise RuntimeError(f"{name}: draft of {k} filled {filled} rows natively, {filled_ref} by XGrammar")
            differing += rows_differ(mine.numpy()[:filled], ref.numpy()[:filled], size)
            compared += filled
        tree = draft_tree(ours, rest, settings.tree_nodes, size, stops, rng)
        nxt, sib, tok = (torch.tensor(v, dtype=torch.int64) for v in tree)
        mine, ref = xgr.allocate_token_bitmask(nxt.shape[0], size), xgr.allocate_token_bitmask(nxt.shape[0], size)
        for _ in range(settings.repeats):
            clock.time(f"tree {settings.tree_nodes}/native", lambda: ours.traverse_draft_tree(nxt, sib, tok, mine))
            clock.time(f"tree {settings.tree_nodes}/xgrammar", lambda: theirs.traverse_draft_tree(nxt, sib, tok, ref))
        differing += rows_differ(mine.numpy(), ref.numpy(), size)
        compared += nxt.shape[0]
    return {
        "grammar": name,
        "tokenizer": vocab.name,
        "vocab_size": size,
        "classes": classes.num_classes,
        "positions": len(spots),
        "repeats": settings.repeats,
        "tree_nodes": settings.tree_nodes,
        "ops": clock.by_call(),
        "compared_rows": compared,
        "differing_rows": differing,
    }


def spec_table(result: dict[str, Any]) -> str:
    """A markdown table of :func:`measure_spec`'s result, then the mask comparison."""
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
