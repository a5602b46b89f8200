"""The normal form's passes in C (``native/_gnf_passes.h``) against their Python walks in ``grammar/gnf.py``.

Where the GNF is built in a compiled store, GENERATING / NULLABLE, restricting to generating symbols,
REACHABLE, ε-removal's optional occurrences, the dense renumbering and merging's renaming run in C.
The Python walks stay the reference: the same grammar built with ``gnf.PASSES_IN_C`` off must give the
same nonterminals, table and store nodes under the same ids (and so the WordStore's, which
``tests/test_compiled.py`` checks on the bundled grammars).
"""

from __future__ import annotations

import random

import pytest
from paths import BUNDLED, CORPORA, grammar_id, third_party_grammars

from cfgzip_lab.grammar import gnf as gnf_module
from cfgzip_lab.grammar.diagnostics import GrammarError
from cfgzip_lab.native import compiled
from cfgzip_lab.pipeline import compile_grammar

pytestmark = pytest.mark.skipif(
    not compiled.available() or not hasattr(compiled._kernel.Words, "map_symbols"),
    reason="the compiled kernel (with the normal form's passes) is not built here",
)


def _sample() -> list[tuple[str, str, str]]:
    """Bundled grammars, a seeded sample of third-party grammars, XGrammar's test grammars and JSON
    Schemas, and calflow (its merging unites edges that meet in one block: the C pass's other branch)."""
    rng = random.Random(20)
    out = [(grammar_id(p), p.read_text(encoding="utf-8"), "ebnf") for p in BUNDLED]
    third = third_party_grammars()
    out += [(grammar_id(p), p.read_text(encoding="utf-8"), "auto") for p in rng.sample(third, min(5, len(third)))]
    out += [(grammar_id(p), p.read_text(encoding="utf-8"), "auto") for p in third if p.name == "calflow.ebnf"]
    ebnf = sorted((CORPORA / "xgrammar-tests").glob("*.ebnf"))
    out += [(p.name, p.read_text(encoding="utf-8"), "ebnf") for p in rng.sample(ebnf, min(12, len(ebnf)))]
    schemas = sorted(p for p in (CORPORA / "json-schema-test-suite").glob("*.json") if ".instance" not in p.name)
    out += [(p.name, p.read_text(encoding="utf-8"), "json_schema") for p in rng.sample(schemas, min(8, len(schemas)))]
    return out


SAMPLE = _sample()


def _built(text: str, kind: str, in_c: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", in_c)
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError as error:
        return ("error", str(error))
    store = gnf.store
    return gnf.names, gnf.table, gnf.start, gnf.origins, [store.nodes[i] for i in range(len(store))]


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_c_passes_make_the_python_walks_nodes(name, text, kind, monkeypatch):
    python = _built(text, kind, False, monkeypatch)
    native = _built(text, kind, True, monkeypatch)
    assert python[:4] == native[:4]
    assert python[4:] == native[4:], "same normal form, but the store's nodes differ"


@pytest.mark.parametrize("name,text,kind", SAMPLE, ids=[name for name, _, _ in SAMPLE])
def test_the_stack_adjacency_in_c_is_the_python_fixpoint(name, text, kind, monkeypatch):
    """gnf.stack_below (merging's contexts, classing's adjacency) in C is the Python fixpoint."""
    try:
        gnf = compile_grammar(text, kind=kind).gnf
    except GrammarError:
        pytest.skip("not lowered")
    if gnf.families:
        pytest.skip("counted families: the Python fixpoint only")
    native = gnf_module.stack_below(gnf.table, gnf.store, gnf.start)
    monkeypatch.setattr(gnf_module, "PASSES_IN_C", False)
    assert native == gnf_module.stack_below(gnf.table, gnf.store, gnf.start)


def test_the_passes_run_in_c_where_the_store_is_compiled(monkeypatch):
    """Not only equal results: the C passes are what runs (a Python walk left in the way would pass
    the comparison above by itself)."""
    calls = []
    real = gnf_module._passes

    def spy(store):
        native = real(store)
        calls.append(native is not None)
        return native

    monkeypatch.setattr(gnf_module, "_passes", spy)
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n')
    assert calls and all(calls)
    calls.clear()
    compile_grammar('root ::= "a" x? "b"\nx ::= [0-9]+ | "" \n', compiled_store=False)
    assert calls and not any(calls)
