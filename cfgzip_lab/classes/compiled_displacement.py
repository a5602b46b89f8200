"""The displacer over the compiled word store: :mod:`.displacement`'s step run in C.

:class:`CompiledDisplacer` is a :class:`~.displacement.Displacer` whose store is a
:class:`~cfgzip_lab.grammar.compiled_words.CompiledWordStore` and whose step, stack adjacency and
runs of atoms are the kernel's (``csrc/displace.c``: the same nodes under the same ids as the Python step,
``tests/test_compiled.py`` checks it node for node). :func:`stepping_store` gives the σ_in index
build and the native walk the store they step in.
"""

from __future__ import annotations

from ..grammar.compiled_words import CompiledWordStore, set_grammar, supports, symbol_widths
from ..grammar.gnf import GNF
from .adjacency import BOTTOM
from .displacement import Displacer

__all__ = ["CompiledDisplacer", "make_displacer", "stepping_store"]


class CompiledDisplacer(Displacer):
    """:class:`~cfgzip_lab.classes.displacement.Displacer` on a compiled store seeded with the GNF's.

    The GNF's own store is left as it is (a Python Displacer made later gets the ids it always got).
    """

    def __init__(self, gnf: GNF):  # noqa: D107 - Displacer's Python tables are not built
        if not supports(gnf):
            raise RuntimeError(
                "the compiled word store is not built, or the grammar has token atoms or counted repetitions "
                "whose counts pass the compiled store's symbols"
            )
        self.gnf = gnf
        # The GNF's own store when it is compiled (the normal form was built in it, pipeline.py):
        # classing adds its nodes there, as the Python Displacer does in a WordStore. Otherwise a
        # compiled copy (same ids); the GNF's WordStore is left as it is.
        store = gnf.store
        if not isinstance(store, CompiledWordStore):
            store = CompiledWordStore.seeded(store, symbol_widths(gnf))
        self.store = store
        self.n = gnf.num_nonterminals
        self.sep = self.n
        self.num_atoms = len(gnf.atoms)
        self.families = gnf.families if hasattr(gnf, "families") else []
        self.initial = set_grammar(self.store.native, gnf)
        self.atom_table = bytes(gnf.atom_of)
        self._below: list[set[int]] | None = None

    @property
    def below(self) -> list[set[int]]:
        """The stack adjacency the compiled step uses (``stack_adjacency(gnf)``, computed in C)."""
        if self._below is None:
            self._below = self.store.native.below_sets(BOTTOM)
        return self._below

    def step(self, node: int, atom: int) -> int:
        return self.store.native.step(node, atom)

    def of_atoms(self, atoms: bytes) -> int:
        return self.store.native.run(self.initial, atoms)[0]


def stepping_store(displacer: Displacer):
    """The compiled store the σ_in index and the walk step in for ``displacer`` (``_native.Words``), or
    None where they step in Python (a WordStore). A Python Displacer on a compiled store (classing's
    fall-back, or ``compute_classes(compiled=False)`` on a normal form built in a compiled store)
    steps in C too, on the same nodes: its grammar's tables are set in the store first (the same
    initial node). A GNF the kernel does not support (:func:`supports`) is never in a compiled
    store (``compile_grammar`` builds those in a WordStore) and is refused here rather than half-run."""
    store = displacer.store
    if not isinstance(store, CompiledWordStore):
        return None
    if not isinstance(displacer, CompiledDisplacer):
        gnf = displacer.gnf
        if not supports(gnf):
            raise RuntimeError(
                "a normal form with token atoms (or counted repetitions past the compiled symbols) in a "
                "compiled word store: build it with compile_grammar(..., compiled_store=False)"
            )
        set_grammar(store.native, gnf)
    return store.native


def make_displacer(gnf: GNF) -> Displacer:
    """A :class:`CompiledDisplacer` where :func:`supports` ``gnf``, else the Python :class:`Displacer`."""
    return CompiledDisplacer(gnf) if supports(gnf) else Displacer(gnf)
