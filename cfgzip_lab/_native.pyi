"""cfgzip_lab._native: the compiled core (C sources in ``csrc/``, one file per concept; ``docs/design.md``).

Optional: :mod:`cfgzip_lab._binding` loads it (``kernel``, or None where it is not built, its
``ABI_VERSION`` is not the one the Python modules expect, or ``CFGZIP_NATIVE_KERNEL=0``); every
function has a Python reference that the tests compare with it node for node and bit for bit.
Buffers are read through the buffer protocol (bytes, numpy arrays); ``Buffer`` below is any of them.
The file after each docstring is the C that defines it.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Buffer = Any  # bytes, bytearray, memoryview or a C-contiguous numpy array of the stated dtype
Node = int
Edges = tuple[tuple[int, Node], ...]

ABI_VERSION: int
"""The API's version: ``cfgzip_lab._binding.ABI_VERSION`` must equal it (``csrc/module.c``)."""
MAX_DEPTH: int
"""Recursion depth past which the store raises :class:`Unsupported` (words.h)."""
COUNTED_SYMBOL_BITS: int
"""Bits of a packed counted-repetition symbol (words.h)."""

class Unsupported(RuntimeError):
    """What the compiled store does not do (too deep, an unknown symbol kind): run the Python reference."""

# ---- the word store (csrc/words.c, csrc/store.c; reference cfgzip_lab.grammar.words.WordStore) ----
class Words:
    """A compiled word store seeded with a WordStore's nodes: the same ids for the same calls."""

    created: int
    """Nodes interned so far (budgets read it)."""
    limit: int
    """Past this many created nodes, the budget error."""

    def __init__(
        self,
        nodes: list[tuple[bool, Edges]],
        created: int = 0,
        budget_exc: type | None = None,
        widths: tuple[int, int] = ...,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, node: Node) -> tuple[bool, Edges]: ...
    def make(self, accepts: bool, edges: Edges) -> Node:
        """Intern (accepts, edges) (store.c)."""
    def union(self, a: Node, b: Node) -> Node:
        """The union of two node sets (words.c)."""
    def union_many(self, nodes: Iterable[Node]) -> Node:
        """The union of them all at once (WordStore.union_many)."""
    def union_concats(self, pairs: Iterable[tuple[Node, Node]]) -> Node:
        """The union of every a . b (w_union_n, words.c)."""
    def concat(self, a: Node, b: Node) -> Node:
        """The concatenation of two node sets (words.c)."""
    def edges(self, node: Node) -> Edges:
        """A node's edges as ((symbol, child), ...)."""
    def accepts(self, node: Node) -> bool:
        """Whether a node holds the empty word."""
    def child(self, node: Node, symbol: int) -> Node:
        """The child under symbol, EMPTY (0) when absent."""
    def reachable(self, roots: Iterable[Node]) -> set[Node]:
        """Every node below the roots (WordStore.reachable)."""
    def count(self, node: Node) -> int | None:
        """A node's words, None past 64 bits (WordStore.count)."""
    def stats(self) -> dict[str, int]:
        """Sizes of the store and its memos."""
    # the displacer (csrc/displace.c; reference cfgzip_lab.classes.displacement.Displacer)
    def grammar(
        self, table: list[dict[int, Node]], num_atoms: int, start: int, families: Sequence[tuple[int, int, int]] = ()
    ) -> Node:
        """Set the normal form (its table, atoms, start, counted families); the displacer's initial node."""
    def below_sets(self, bottom: object) -> list[set[object]]:
        """The stack adjacency as gnf.stack_below returns it."""
    def step(self, node: Node, atom: int) -> Node:
        """Displacer.step(node, atom)."""
    def run(self, node: Node, atoms: Buffer, budget: int = -1) -> tuple[Node, int]:
        """Step through atoms (bytes of byte classes): (node, created)."""
    # the normal form's passes (csrc/gnf_passes.c, csrc/gnf_merge.c; reference cfgzip_lab.grammar.gnf)
    def map_symbols(self, roots: Sequence[Node], to: Buffer, memo: Buffer) -> list[Node]:
        """gnf._map_symbols."""
    def optional(self, roots: Sequence[Node], nullable: bytes, memo: Buffer) -> list[Node]:
        """gnf._remove_epsilon's opt: any subset of the nullable occurrences deleted."""
    def closure(self, nts: Sequence[int], roots: Sequence[Node], m: int, generating: bool) -> list[int]:
        """gnf._closure: GENERATING or NULLABLE, the least fixpoint."""
    def reach(self, roots: Sequence[Node], start: int) -> list[int]:
        """gnf._remove_useless's REACHABLE."""
    def symbols(self, roots: Sequence[Node]) -> set[int]:
        """gnf._symbols_named: every symbol below the roots."""
    def useless(self, nts: Sequence[int], roots: Sequence[Node], m: int, start: int) -> list[int] | None:
        """gnf._remove_useless where it restricts nothing: the nonterminals kept, or None."""
    def word(self, symbols: Sequence[int]) -> Node:
        """WordStore.word: the set holding one word."""
    def below_sets_of(self, rows: Sequence[Node], start: int, bottom: object) -> list[set[object]] | None:
        """gnf.stack_below without families (None past its memory bound)."""
    def left_corner_order(self, nts: Sequence[int], roots: Sequence[Node], m: int) -> list[int]:
        """gnf._left_corner_order (Tarjan, the Python walk's order)."""
    def merge_equivalent(self, atoms: Any, tails: Any, start: int) -> tuple[Any, Any] | None:
        """gnf._merge_equivalent without families: (block, merged) or None."""
    def merge_table(
        self,
        table: list[dict[int, Node]],
        start: int,
        family_items: list[int] = ...,
        family_bounds: list[tuple[int, int]] = ...,
    ) -> tuple[Any, ...] | None:
        """merge_equivalent on the table's dicts, the merged rows as dicts; with counted-repetition families
        (items, (min, max) with max -1 when unbounded) merged as gnf._merge_equivalent does, family_of third."""
    def substitute_leading(self, seq: Sequence[int], roots: Sequence[Node], at: Any) -> list[Node]:
        """gnf._substitute_all_leading without families."""
    def remove_units(self, nts: Sequence[int], roots: Sequence[Node], m: int, at: Any) -> list[Node]:
        """gnf._remove_units without families."""
    def reachable_count(self, roots: Sequence[Node]) -> int:
        """len(reachable(roots))."""
    def count_sum(self, roots: Sequence[Node]) -> int | None:
        """The sum of count(r) over the roots, or None."""
    def left_work(self, order: Sequence[int], roots: Sequence[Node], m: int) -> bytes:
        """The nonterminals gnf._remove_left_recursion changes (a flag each)."""
    def atom_rows(self, roots: Sequence[Node], to: Buffer, memo: Buffer) -> list[dict[int, Node]]:
        """gnf._to_gnf's table: {atom: tail mapped through to} per root."""
    def union_all(self, nodes: Iterable[Node]) -> Node:
        """WordStore.union_all."""
    def epsilon_free(
        self, nts: Sequence[int], roots: Sequence[Node], nullable: bytes, memo: Buffer, at: Any
    ) -> list[Node]:
        """gnf._remove_epsilon's loop: optional, then without the empty word."""
    def lift_rule(
        self,
        alts: Sequence[tuple],
        spans: Sequence[tuple],
        ids: dict[str, int],
        shapes: dict[int, tuple[Node, str]],
        shape_of: Callable[[Any], tuple[Node, str]],
        names: list[str],
        origins: list[tuple],
        rule_sets: dict[int, Node],
        name: str,
        rule: str,
    ) -> Node:
        """gnf._lift_terminals's loop over one rule (one nonterminal per terminal occurrence)."""
    def lift_all(
        self,
        rules: dict[str, list[tuple]],
        counted: dict[str, Any],
        live: set[str],
        symbol_spans: dict,
        cfg_origins: dict,
        ids: dict[str, int],
        shapes: dict[int, tuple[Node, str]],
        shape_of: Callable[[Any], tuple[Node, str]],
        kept: Any,
        names: list[str],
        origins: list[tuple],
        rule_sets: dict[int, Node],
        deadline: Any,
    ) -> None:
        """lift_rule's loop over every live, uncounted rule in one call (csrc/gnf_passes.c)."""
    # a normal form as arrays (csrc/gnf_arrays.c; reference cfgzip_lab.grammar.gnf_arrays)
    def subgraph(self, roots: Buffer) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The nodes below roots as arrays: (accepts, indptr, symbols, children, root_ids)."""
    def load_arrays(self, accepts: Buffer, indptr: Buffer, symbols: Buffer, children: Buffer) -> None:
        """A fresh store's nodes from arrays (ids 2, 3, ...)."""
    # what walks the store
    def classify(
        self,
        trie: VocabTrie,
        atom_table: Buffer,
        initial: Node,
        budget: int,
        max_nodes: int,
        node_of: Buffer,
        fallback: Buffer,
        progress: Callable[..., Any] | None,
        cancel: Callable[[], bool] | None,
        lazy: bool = False,
    ) -> tuple[Any, ...]:
        """Classing's vocabulary walk (csrc/classing.c; reference classes.classing._walk)."""
    def sigma_index(self, class_nodes: Buffer, max_words_per_node: int, max_words: int) -> tuple[Any, ...]:
        """The σ_in index's arrays (csrc/sigma_index.c; reference native.index.build_index)."""
    def trie_mask(self, trie: object, state: Node, out: Buffer) -> None:
        """out = the class set of state: its DAG walked with the σ_in trie (csrc/trie.c)."""

# ---- the vocabulary trie (csrc/vocab_trie.c; cfgzip_lab.vocab_trie) ----
class VocabTrie:
    """The NORMAL tokens' bytes as a trie, per vocabulary."""

    def __init__(self, token_bytes: list[bytes], kinds: Buffer, normal: int = 0, stop: int = 1) -> None: ...
    def info(self) -> dict[str, int]:
        """Sizes of the trie, and of classing's scan cache kept with it (csrc/classing.c, scan_apply):
        scans_kept, scans_reused, scans_refused, scans_bytes."""
    def same(self, token_bytes: list[bytes], kinds: Buffer) -> bool:
        """Whether it was built from these tokens and kinds."""

# ---- the accept step (csrc/step.c; reference native.walk.StateWalker.advance) ----
class Advancer:
    """The native engine's accept step on a compiled word store."""

    def __init__(
        self,
        store: Words,
        token_bytes: list[bytes],
        class_of: Buffer | None,
        class_kind: Buffer,
        atom_of: Buffer,
        token_budget: int,
        request_budget: int,
        memo_entries: int,
        budget_exc: type,
        ids: Buffer | None = None,
        classes: Buffer | None = None,
    ) -> None: ...
    def accept(self, state: Node, token: int, spent: int) -> tuple[Node, int]:
        """(state after the token, nodes created): EMPTY where refused, -1 a stop the state may end on."""
    def accept_state(self, state: Node, token: int, spent: int) -> Node:
        """accept's state alone (no tuple: a step that allocates none cannot start Python's collector);
        its nodes created in :attr:`last_created`."""
    @property
    def last_created(self) -> int:
        """Nodes the last :meth:`accept_state` created."""
    def stats(self) -> dict[str, int]:
        """Memo hits, advances, memo drops."""

# ---- module functions ----
def assemble(
    trie: VocabTrie,
    kinds: Buffer,
    node_of: Buffer,
    fallback: Buffer,
    class_of: Buffer | None,
    normal: int,
    stop: int,
    nodes: int = -1,
    ranges: bytes | None = None,
) -> tuple[Any, ...]:
    """classing._assemble over arrays: the classes' numbering (csrc/assemble.c)."""

def token_nodes(trie: VocabTrie, class_of: Buffer, class_kind: Buffer, rep_nodes: Buffer, out: Buffer) -> None:
    """Every token's node from its class (csrc/assemble.c)."""

def classify_steps(
    trie: VocabTrie,
    atom_table: Buffer,
    num_atoms: int,
    initial: Node,
    node_of: Buffer,
    fallback: Buffer,
    progress: Callable[..., Any] | None,
    cancel: Callable[[], bool] | None,
    step: Callable[[Node, int, bool], Any],
) -> tuple[Any, ...]:
    """classify with a Python step, for a displacer the compiled store does not run (csrc/classing.c)."""

def cfg_productive(rules: dict[str, list[tuple]], counted: dict[str, Any], byteset_type: type) -> set[str]:
    """dead_ends.productive_nonterminals over a CFG's rules and counted repetitions (csrc/cfg_passes.c)."""

def cfg_byte_bits(rules: dict[str, list[tuple]], byteset_type: type) -> dict[int, Any]:
    """CFG.byte_sets: each distinct bits of the productions' byte sets -> the first byte set with them
    (csrc/cfg_passes.c)."""

def cfg_every_symbol_productive(
    rules: dict[str, list[tuple]], counted: dict[str, Any], productive: set[str], byteset_type: type
) -> bool:
    """dead_ends._every_symbol_productive (csrc/cfg_passes.c)."""

def byte_atoms(bits: frozenset[int]) -> tuple[list[int], bytes] | None:
    """cfg.byte_classes of byte sets given by their bits, and each byte's atom (gnf._partition); None where a set
    has bits past 255, a token atom's (csrc/gnf_passes.c)."""

def cfg_reachable(rules: dict[str, list[tuple]], counted: dict[str, Any], start: str) -> set[str]:
    """gnf._reachable_rules: the names reachable from start (csrc/cfg_passes.c)."""

def serialized_rules(
    conv: Any, rules: list[list], root: int, starts: list[int], byte_table: tuple, origin_type: type, unsupported: type
) -> None:
    """serialized._Converter's walk: the rules root reaches, their names and origins (each an origin_type, as
    provenance._make_origin makes it), productions and spans into conv's CFG; class, repetition and regex helpers
    made through conv's methods (csrc/serialized.c)."""

def json_ints(text: str, pos: int) -> tuple[list[int], int]:
    """json.loads of the JSON array of integers at text[pos], and where it ends; ValueError for anything else
    (csrc/serialized.c)."""

def below_sparse_limit(entries: int) -> int:
    """Set how many entries the stack adjacency's sorted sets may hold before its bitsets take over (a negative
    number: the default, 8,000,000), and return the limit before (csrc/gnf_below.c; tests set 0)."""

def expand_row(
    class_set: bytes,
    groups: Buffer,
    tables: Buffer,
    indptr: Buffer,
    pair_words: Buffer,
    pair_bits: Buffer,
    small_all: Buffer,
    out: Buffer,
    built: Buffer | None = None,
    class_of: Buffer | None = None,
) -> None:
    """A class set -> XGrammar's packed int32 vocabulary row (csrc/expand.c; reference native.rows' numpy path)."""

def expansion_tables(
    class_of: Buffer | None,
    num_classes: int,
    most: int,
    min_tokens: int,
    words: int,
    lazy: bool = False,
    defer: Buffer | None = None,
    listed: Buffer | None = None,
    listed_classes: Buffer | None = None,
    vocab_size: int = -1,
) -> tuple[bytes | bytearray, ...]:
    """The tables expand_row reads, from class_of (csrc/expand.c; reference kernels.union_tables)."""

def trie_new(
    ptr: Buffer,
    syms: Buffer,
    kids: Buffer,
    dense_idx: Buffer,
    dense: Buffer,
    list_ptr: Buffer,
    list_cls: Buffer,
    words: int,
    fptr: Buffer = ...,
    fedges: Buffer = ...,
    family_base: int = ...,
    c_bits: int = ...,
) -> object:
    """The σ_in trie as arrays, a capsule for trie_mask (csrc/trie.c); with ``fptr``/``fedges``, its
    counted repetitions' IN(f, lo, hi) edges (rows family, lo, hi, child) too."""

def trie_arrays(
    edges: Buffer, indptr: Buffer, classes: Buffer, nodes: int, dense_classes: int, words: int
) -> tuple[bytes, ...] | None:
    """A SigmaInIndex's arrays -> the arrays trie_new takes; None where the edges are not sorted (csrc/trie.c)."""

def trie_mask(trie: object, nodes: list[tuple[bool, Edges]], state: Node, out: Buffer) -> None:
    """out = the class set of state in a Python WordStore's node list (csrc/trie.c; the same walk as Words.trie_mask)."""

def mask_logits(
    bitmask: Buffer, bitmask_stride: int, logits: Buffer, rows: int, width: int, elem: int, vocab: int, neg_inf: int
) -> None:
    """-inf in place where the packed mask's bit is 0 (csrc/logits.c; reference XGrammar's apply_token_bitmask_inplace)."""
