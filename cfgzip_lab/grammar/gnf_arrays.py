# C twin: csrc/gnf_arrays.c (subgraph, load_arrays: tests/test_cache.py; docs/design.md)
"""A :class:`~.gnf.GNF` as plain arrays and JSON, and back: what the class cache stores so that a
fresh process gets the normal form without the front end (c_like: 0.55 s of parsing, lowering
and normal form; reading these arrays back takes milliseconds).

No pickle: arrays are plain integers, the rest is JSON (names, provenance, the step sizes). The
word store is written as the nodes the table's tails reach, renumbered densely (children before
parents, EMPTY and EPSILON kept at 0 and 1), so a loaded GNF owns a store holding nothing else.
Node ids therefore differ from a freshly compiled GNF's; nothing stored depends on them (the
σ_in index is keyed by nonterminal ids and checked by :func:`cfgzip_lab.native.index.gnf_digest`).

:data:`FIELDS` is the one list of what is stored: one :class:`_Field` per :class:`~.gnf.GNF`
field, each with its writer and reader. A new GNF field is one more entry here and a bump of
:data:`GNF_FORMAT` (``tests/test_cache.py`` checks that every GNF field is listed, so a field
cannot be added to the GNF and silently left out of caches).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cfg import TOKEN_BASE, ByteSet
from .counted import Family, is_family_symbol, split_family_symbol
from .gnf import GNF, GNFStep, _unread_origins
from .provenance import Origin
from .words import EMPTY, EPSILON, WordStore

__all__ = ["GNF_FORMAT", "FIELDS", "compact_gnf", "gnf_to_arrays", "gnf_from_arrays", "GNFArraysError", "PREFIX"]

GNF_FORMAT = 2
"""Version of this layout; a reader refuses any other (the cache then rebuilds the GNF from the text)."""

PREFIX = "gnf_"
"""Every array's name starts with this (the class cache holds other arrays beside them)."""


class GNFArraysError(ValueError):
    """Stored GNF arrays or JSON that do not describe a valid GNF (the message says what)."""


# -- the word store ----------------------------------------------------------------------------
def _store_to_arrays(store: WordStore, roots) -> tuple[dict[str, np.ndarray], dict[int, int]]:
    """The nodes reachable from ``roots``, children first, as CSR arrays; and old id → new id (of
    the roots at least). A compiled store lists them in C (``Words.subgraph``, the same order)."""
    native = getattr(store, "native", None)
    if native is not None:
        return _compiled_store_to_arrays(native, roots)
    nodes = store.nodes
    new_id = {EMPTY: EMPTY, EPSILON: EPSILON}
    order: list[int] = []
    for root in roots:  # iterative post-order: children get their ids before their parents
        if root in new_id:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in new_id:
                continue
            if expanded:
                new_id[node] = len(order) + 2
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((c, False) for _, c in nodes[node][1] if c not in new_id)
    edges = [nodes[n][1] for n in order]
    counts = np.fromiter((len(e) for e in edges), dtype=np.int64, count=len(edges))
    indptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    flat = [pair for e in edges for pair in e]
    pairs = np.array(flat, dtype=np.int64).reshape(-1, 2)
    arrays = {
        "store_accepts": np.fromiter((nodes[n][0] for n in order), dtype=np.uint8, count=len(order)),
        "store_indptr": indptr.astype(np.int32),
        # int64 where counted-repetition members (symbols from 2**48, see .counted) occur
        "store_symbols": pairs[:, 0].astype(np.int64 if pairs.size and pairs[:, 0].max() >= 1 << 31 else np.int32),
        "store_children": np.fromiter((new_id[c] for c in pairs[:, 1].tolist()), dtype=np.int32, count=len(pairs)),
    }
    return arrays, new_id


def _compiled_store_to_arrays(native, roots) -> tuple[dict[str, np.ndarray], dict[int, int]]:
    roots = np.fromiter(roots, dtype=np.int64)
    accepts, indptr, symbols, children, root_ids = native.subgraph(roots)
    symbols = np.frombuffer(symbols, dtype=np.int64)
    arrays = {
        "store_accepts": np.frombuffer(accepts, dtype=np.uint8),
        "store_indptr": np.frombuffer(indptr, dtype=np.int32),
        "store_symbols": symbols if symbols.size and symbols.max() >= 1 << 31 else symbols.astype(np.int32),
        "store_children": np.frombuffer(children, dtype=np.int32),
    }
    new_id = {EMPTY: EMPTY, EPSILON: EPSILON}
    new_id.update(zip(roots.tolist(), np.frombuffer(root_ids, dtype=np.int32).tolist()))
    return arrays, new_id


def _store_from_arrays(arrays: dict[str, np.ndarray], compiled: bool = False) -> WordStore:
    """The store of a file's ``arrays``, checked (a DAG, edges sorted, no node twice) before it is used."""
    accepts = arrays["store_accepts"]
    indptr = arrays["store_indptr"].astype(np.int64)
    symbols = arrays["store_symbols"].astype(np.int64)
    children = arrays["store_children"].astype(np.int64)
    count = accepts.shape[0]
    if indptr.shape != (count + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != symbols.size:
        raise GNFArraysError("the word store's edge lists do not match its node count")
    if children.shape != symbols.shape:
        raise GNFArraysError("the word store's edges have no child each")
    # Children first: every child id is an earlier node (and never EMPTY), so the store is a DAG.
    owner = np.repeat(np.arange(count, dtype=np.int64) + 2, np.diff(indptr))
    if children.size and (children.min() < EPSILON or np.any(children >= owner)):
        raise GNFArraysError("the word store has an edge to a later node or to the empty set")
    if np.any((np.diff(symbols) <= 0) & (owner[1:] == owner[:-1])):
        raise GNFArraysError("the word store has a node whose edges are not sorted by symbol")
    if compiled:  # the same checks below, in C, without a tuple per node
        return _compiled_store(accepts, indptr, symbols, children)
    store = WordStore()
    pairs = list(zip(symbols.tolist(), children.tolist()))
    bounds = indptr.tolist()
    keys = [(bool(acc), tuple(pairs[bounds[i] : bounds[i + 1]])) for i, acc in enumerate(accepts.tolist())]
    store.nodes.extend(keys)
    store._index.update((key, i + 2) for i, key in enumerate(keys))
    if len(store._index) != len(store.nodes):
        raise GNFArraysError("the word store holds the same node twice")
    store.created = count
    return store


# -- the fields --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Field:
    """How one GNF field is stored: ``save(gnf, arrays, doc, ids)`` fills arrays / JSON,
    ``load(arrays, doc, store)`` returns the field's value (``ids`` maps store node ids)."""

    name: str
    save: Callable[[GNF, dict, dict, dict], None]
    load: Callable[[dict, dict, WordStore], Any]


def _json(name: str, encode=lambda v: v, decode=lambda v: v) -> _Field:
    def save(gnf, arrays, doc, ids):
        doc[name] = encode(getattr(gnf, name))

    return _Field(name, save, lambda arrays, doc, store: decode(doc[name]))


def _save_atoms(gnf, arrays, doc, ids):
    # Atoms partition 0..255 (grammar.cfg.byte_classes), so the byte → atom map says it all;
    # the token atoms after them (grammar.token_macros: bits from 256 on) are listed apart.
    arrays["atom_of"] = np.asarray(gnf.atom_of, dtype=np.int16)
    tokens = [hex(a.bits >> TOKEN_BASE) for a in gnf.atoms[max(gnf.atom_of) + 1 :] if a.bits]  # not the dead one
    if tokens:
        doc["token_atoms"] = tokens


def _load_atom_of(arrays, doc, store):
    atom_of = arrays["atom_of"]
    if atom_of.shape != (256,):
        raise GNFArraysError("the byte → atom map has no entry for every byte")
    return [int(a) for a in atom_of.tolist()]


def _load_atoms(arrays, doc, store):
    atom_of = _load_atom_of(arrays, doc, store)
    count = max(atom_of) + 1
    bits = [0] * count
    for byte, atom in enumerate(atom_of):
        bits[atom] |= 1 << byte
    if min(atom_of) < 0 or not all(bits):
        raise GNFArraysError("the byte → atom map leaves an atom without bytes")
    tokens = doc.get("token_atoms", [])
    if not isinstance(tokens, list) or not all(isinstance(t, str) and int(t, 16) > 0 for t in tokens):
        raise GNFArraysError("the token atoms are not a list of non-empty bit sets")
    atoms = [ByteSet(b) for b in bits] + [ByteSet(int(t, 16) << TOKEN_BASE) for t in tokens]
    dead = doc.get("dead_atom", -1)
    if dead not in (-1, len(atoms)):
        raise GNFArraysError("the dead terminal's atom is not the one after the byte and token atoms")
    return atoms + ([ByteSet(0)] if dead == len(atoms) else [])


def _save_table(gnf, arrays, doc, ids):
    rows = gnf.table
    counts = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    arrays["table_indptr"] = indptr.astype(np.int32)
    arrays["table_atoms"] = np.fromiter((a for r in rows for a in r), dtype=np.int32, count=int(indptr[-1]))
    arrays["table_tails"] = np.fromiter(
        (ids[t] for r in rows for t in r.values()), dtype=np.int32, count=int(indptr[-1])
    )


def _load_table(arrays, doc, store):
    indptr = arrays["table_indptr"].astype(np.int64)
    atoms = arrays["table_atoms"].tolist()
    tails = arrays["table_tails"].tolist()
    n = len(doc["names"])
    if indptr.shape != (n + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(atoms):
        raise GNFArraysError("the production table does not have one row per nonterminal")
    if len(tails) != len(atoms) or (tails and (min(tails) < EPSILON or max(tails) >= len(store.nodes))):
        raise GNFArraysError("the production table points outside the word store")
    bounds = indptr.tolist()
    return [dict(zip(atoms[bounds[a] : bounds[a + 1]], tails[bounds[a] : bounds[a + 1]])) for a in range(n)]


def _origin_to_json(o: Origin) -> list:
    return [o.rule, o.kind, list(o.span) if o.span is not None else None, o.line, o.column, o.excerpt]


def _origin_from_json(v: list) -> Origin:
    rule, kind, span, line, column, excerpt = v
    return Origin(rule, kind, tuple(span) if span is not None else None, line, column, excerpt)


FIELDS: tuple[_Field, ...] = (
    _json("names", list, lambda v: [str(s) for s in v]),
    _json("start", int, int),
    _json("dead_atom", int, int),
    _json("accepts_empty", bool, bool),
    _Field("atoms", lambda *a: None, _load_atoms),  # derived from atom_of (saved with it)
    _Field("atom_of", _save_atoms, _load_atom_of),
    _Field("table", _save_table, _load_table),
    _Field("store", lambda *a: None, lambda arrays, doc, store: store),  # saved first, see gnf_to_arrays
    _json(
        "steps",
        lambda steps: [[s.name, s.nonterminals, s.dag_nodes, s.productions, s.seconds] for s in steps],
        lambda v: [GNFStep(*row) for row in v],
    ),
    _json(
        "origins",
        lambda origins: [[_origin_to_json(o) for o in os_] for os_ in origins],
        lambda v: [tuple(_origin_from_json(o) for o in os_) for os_ in v],
    ),
    _json("merged_from", lambda v: [list(m) for m in v], lambda v: [tuple(m) for m in v]),
    _json(
        "families",
        lambda fams: [[f.name, f.item, f.min, f.max, f.head, [_origin_to_json(o) for o in f.origins]] for f in fams],
        lambda v: [
            Family(
                str(name),
                int(item),
                int(low),
                None if high is None else int(high),
                int(head),
                tuple(map(_origin_from_json, origins)),
            )
            for name, item, low, high, head, origins in v
        ],
    ),
)


def gnf_to_arrays(gnf: GNF) -> tuple[dict[str, np.ndarray], dict]:
    """``gnf`` as arrays (names prefixed :data:`PREFIX`) and a JSON-able document (with ``format``)."""
    store_arrays, ids = _store_to_arrays(gnf.store, [t for row in gnf.table for t in row.values()])
    arrays: dict[str, np.ndarray] = dict(store_arrays)
    doc: dict = {"format": GNF_FORMAT}
    for f in FIELDS:
        f.save(gnf, arrays, doc, ids)
    return {PREFIX + k: v for k, v in arrays.items()}, doc


def gnf_from_arrays(arrays: dict[str, np.ndarray], doc: dict, *, compiled: bool | None = None) -> GNF:
    """Inverse of :func:`gnf_to_arrays`; raises :class:`GNFArraysError` for anything that does
    not describe a GNF of this layout (another format, missing or inconsistent parts).

    ``compiled`` (default: where the kernel is built and runs this GNF, no counted families or token
    atoms, as :func:`cfgzip_lab.grammar.compiled_words.supports` says) reads the store into a compiled one
    (:class:`~cfgzip_lab.grammar.compiled_words.CompiledWordStore`), the store ``compile_grammar`` gives such a
    GNF: the native engine's walk then runs on it without copying it (0.2 ms of a JSON Schema's warm
    start, 6 ms of sql_select's cold compaction); ``False``: a :class:`~.words.WordStore`, the reference."""
    if not isinstance(doc, dict) or doc.get("format") != GNF_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise GNFArraysError(f"GNF layout {got!r}, this cfgzip_lab reads {GNF_FORMAT}")
    plain = {k[len(PREFIX) :]: v for k, v in arrays.items() if k.startswith(PREFIX)}
    if compiled is None:
        compiled = _compiled_store_fits(doc)
    try:
        store = _store_from_arrays(plain, compiled)
        values = {f.name: f.load(plain, doc, store) for f in FIELDS}
    except GNFArraysError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GNFArraysError(f"the stored GNF is incomplete or malformed ({type(exc).__name__}: {exc})") from None
    n = len(values["names"])
    if not 0 <= values["start"] < n or any(len(values[k]) != n for k in ("table", "origins", "merged_from")):
        raise GNFArraysError("the stored GNF's parts disagree on its number of nonterminals")
    table_atoms = plain["table_atoms"]
    if table_atoms.size and (table_atoms.min() < 0 or table_atoms.max() >= len(values["atoms"])):
        raise GNFArraysError("the production table names an atom the byte map does not have")
    families = values["families"]
    if any(not 0 <= f.item < n or f.min < 0 or (f.max is not None and f.max < 2) for f in families):
        raise GNFArraysError("a counted repetition names an item the GNF does not have, or impossible bounds")
    symbols = plain["store_symbols"].astype(np.int64)
    members = symbols[symbols >= n]
    if symbols.size and symbols.min() < 0:
        raise GNFArraysError("a tail in the word store names a nonterminal the GNF does not have")
    for s in np.unique(members).tolist():
        if not is_family_symbol(s):
            raise GNFArraysError("a tail in the word store names a nonterminal the GNF does not have")
        f, c = split_family_symbol(s)
        if f >= len(families) or not 1 <= c <= families[f].last:
            raise GNFArraysError("a tail names a member of a counted repetition the GNF does not have")
    return GNF(**values)


def _compiled_store(store_accepts, store_indptr, store_symbols, store_children) -> WordStore:
    """A compiled store loaded from the arrays; ``load_arrays`` checks the edge lists against the node
    count, that every edge goes to an earlier node, that edges are sorted, and that no node repeats."""
    from .._binding import kernel
    from .compiled_words import CompiledWordStore
    from .words import BudgetExceeded

    native = kernel.Words([], 0, BudgetExceeded)
    try:
        native.load_arrays(
            np.ascontiguousarray(store_accepts, dtype=np.uint8),
            np.ascontiguousarray(store_indptr, dtype=np.int32),
            np.ascontiguousarray(store_symbols, dtype=np.int64),
            np.ascontiguousarray(store_children, dtype=np.int32),
        )
    except ValueError as exc:
        raise GNFArraysError(f"the word store does not read back ({exc})") from None
    return CompiledWordStore(native)


def compact_gnf(gnf: GNF, sizes_store=None) -> GNF:
    """``gnf`` over a store that holds its own nodes alone: what ``gnf_from_arrays(*gnf_to_arrays(gnf))``
    gives (the same node numbering, fields and store kind), without the JSON document and its checks
    (what a cold start keeps in memory instead of classing's whole word store; a JSON Schema's
    normal form: 0.6 ms through the arrays, ~0.1 ms here). ``sizes_store``: a compiled store seeded
    with ``gnf.store``'s nodes (classing's), where the steps' sizes are counted (:meth:`GNFStep.resolved`)."""
    store_arrays, ids = _store_to_arrays(gnf.store, [t for row in gnf.table for t in row.values()])
    from .compiled_words import supports

    compiled = supports(gnf)
    # compiled: the checks left to Words.load_arrays, which makes each of them in C as it loads (the
    # numpy passes a file read makes, for their messages, were ~0.1 ms of a small schema's start)
    store = _compiled_store(**store_arrays) if compiled else _store_from_arrays(store_arrays)
    table = [{a: ids[t] for a, t in row.items()} for row in gnf.table]
    # the steps' sizes counted now, in the store they were counted in (GNFStep.later), not kept alive by them
    steps = [step.resolved(sizes_store) for step in gnf.steps]
    # the origins as they stand: made when first read, if nobody has read them yet (they name no store node)
    origins = _unread_origins(gnf)
    return dataclasses.replace(gnf, table=table, store=store, steps=steps, origins=origins, _family_rows={})


def _compiled_store_fits(doc: dict) -> bool:
    """Whether a stored GNF belongs in a compiled store: the kernel built, no counted-repetition families and no token atoms (what ``compile_grammar`` builds in a WordStore)."""
    from .compiled_words import available

    return available() and not doc.get("families") and not doc.get("token_atoms")


def field_names() -> set[str]:
    """The GNF's dataclass fields (what :data:`FIELDS` must cover)."""
    return {f.name for f in dataclasses.fields(GNF) if not f.name.startswith("_")}  # _family_rows: a memo
