/* cfgzip_lab._native: the extension's Python glue, and nothing else. Its tables name the functions
 * the other files define (methods.h), its init makes the module, and ABI_VERSION is what
 * cfgzip_lab/_binding.py checks before any Python module uses it.
 *
 * Optional: the Python paths run where this module is absent (or CFGZIP_NATIVE_KERNEL=0), and the
 * tests compare the two node for node and bit for bit. Built by `pip install -e .` / the wheel build
 * (pyproject.toml, [[tool.setuptools.ext-modules]], optional = true): a machine without a C compiler
 * still installs. Its API, with one line per function: cfgzip_lab/_native.pyi; which file holds which
 * concept, and its Python reference: docs/design.md.
 */
#include "methods.h"

/* Raise together with cfgzip_lab/_binding.py's ABI_VERSION when a function is added, removed or changes
 * its arguments. */
#define ABI_VERSION 5

PyObject *Unsupported;

/* ---- the module's functions ---- */
static PyMethodDef module_functions[] = {
    {"below_sparse_limit", below_sparse_limit, METH_O, "entries of the sparse stack adjacency before its bitsets (csrc/gnf_below.c)"},
    {"expand_row", expand_row, METH_VARARGS, "class set bytes -> packed int32 vocabulary row (csrc/expand.c)"},
    {"filler_new", filler_new, METH_VARARGS, "an engine's trie, store and near rows, for fill_state (csrc/fill.c)"},
    {"fill_state", (PyCFunction)(void (*)(void))fill_state, METH_FASTCALL, "a state's packed vocabulary row into a bitmask row (csrc/fill.c)"},
    {"filler_stats", filler_stats, METH_O, "a filler's hits, rows made and drops (csrc/fill.c)"},
    {"near_rows_stats", near_rows_stats, METH_O, "rows made near, from scratch, classes XORed (csrc/expand.c)"},
    {"near_rows_new", near_rows_new, METH_VARARGS, "expand_row's tables and a ring of rows, for expand_near (csrc/expand.c)"},
    {"expand_near", expand_near, METH_VARARGS,
     "a class set's row from the nearest of the last rows made, or from scratch (csrc/expand.c)"},
    {"expansion_tables", expansion_tables, METH_VARARGS, "class_of -> the tables expand_row reads (csrc/expand.c)"},
    {"trie_new", trie_new, METH_VARARGS, "the sigma_in trie as arrays, for trie_mask (csrc/trie.c)"},
    {"trie_arrays", trie_arrays, METH_VARARGS, "a SigmaInIndex's arrays -> the arrays trie_new takes (csrc/trie.c)"},
    {"trie_mask", trie_mask, METH_VARARGS, "the class set of a parser state: its DAG walked with the trie (csrc/trie.c)"},
    {"mask_logits", mask_logits, METH_VARARGS, "a packed vocabulary mask applied to CPU logits in place (csrc/logits.c)"},
    {"assemble", k_assemble, METH_VARARGS, "classing._assemble over arrays (csrc/assemble.c)"},
    {"token_nodes", k_token_nodes, METH_VARARGS, "every token's node from its class (csrc/assemble.c)"},
    {"classify_steps", k_classify_steps, METH_VARARGS, "classify with a Python step (csrc/classing.c)"},
    {"cfg_productive", cfg_productive, METH_VARARGS, "dead_ends.productive_nonterminals (csrc/cfg_passes.c)"},
    {"cfg_reachable", cfg_reachable, METH_VARARGS, "gnf._reachable_rules (csrc/cfg_passes.c)"},
    {"cfg_byte_bits", cfg_byte_bits, METH_VARARGS, "CFG.byte_sets: bits -> the first byte set (csrc/cfg_passes.c)"},
    {"cfg_every_symbol_productive", cfg_every_symbol_productive, METH_VARARGS,
     "dead_ends._every_symbol_productive (csrc/cfg_passes.c)"},
    {"serialized_rules", serialized_rules, METH_VARARGS, "serialized._Converter.rule over every rule (csrc/serialized.c)"},
    {"json_ints", json_ints, METH_VARARGS, "json.loads of a JSON array of integers, and where it ends (csrc/serialized.c)"},
    {"byte_atoms", gnf_byte_atoms, METH_O, "cfg.byte_classes of byte sets' bits, gnf._partition (csrc/gnf_passes.c)"},
    {NULL, NULL, 0, NULL},
};

/* ---- Words: the compiled word store ---- */
static PyMethodDef words_methods[] = {
    /* the normal form's passes (csrc/gnf_passes.c, csrc/gnf_merge.c) */
    {"map_symbols", (PyCFunction)words_map_symbols, METH_VARARGS, "the normal form's symbol maps (csrc/gnf_passes.c)"},
    {"optional", (PyCFunction)words_optional, METH_VARARGS, "epsilon-removal's opt (csrc/gnf_passes.c)"},
    {"closure", (PyCFunction)words_closure, METH_VARARGS, "GENERATING / NULLABLE (csrc/gnf_passes.c)"},
    {"reach", (PyCFunction)words_reach, METH_VARARGS, "REACHABLE nonterminals (csrc/gnf_passes.c)"},
    {"symbols", (PyCFunction)words_symbols, METH_O, "every symbol below some roots (csrc/gnf_passes.c)"},
    {"useless", (PyCFunction)words_useless, METH_VARARGS, "gnf._remove_useless without restricting (csrc/gnf_passes.c)"},
    {"word", (PyCFunction)words_word, METH_O, "WordStore.word: the set holding one word (csrc/gnf_passes.c)"},
    {"below_sets_of", (PyCFunction)words_below_sets_of, METH_VARARGS, "gnf.stack_below (csrc/gnf_merge.c)"},
    {"left_corner_order", (PyCFunction)words_left_corner_order, METH_VARARGS,
     "gnf._left_corner_order (csrc/gnf_passes.c)"},
    {"merge_equivalent", (PyCFunction)words_merge_equivalent, METH_VARARGS, "gnf._merge_equivalent (csrc/gnf_merge.c)"},
    {"merge_table", (PyCFunction)words_merge_table, METH_VARARGS,
     "gnf._merge_equivalent on the table's dicts (csrc/gnf_merge.c)"},
    {"substitute_leading", (PyCFunction)words_substitute_leading, METH_VARARGS,
     "gnf._substitute_all_leading (csrc/gnf_passes.c)"},
    {"remove_units", (PyCFunction)words_remove_units, METH_VARARGS, "gnf._remove_units (csrc/gnf_passes.c)"},
    {"reachable_count", (PyCFunction)words_reachable_count, METH_O, "len(reachable(roots)) (csrc/gnf_passes.c)"},
    {"count_sum", (PyCFunction)words_count_sum, METH_O, "the sum of count(r) over roots, or None (csrc/gnf_passes.c)"},
    {"left_work", (PyCFunction)words_left_work, METH_VARARGS,
     "gnf._remove_left_recursion's work list (csrc/gnf_passes.c)"},
    {"atom_rows", (PyCFunction)words_atom_rows, METH_VARARGS, "the normal form's table, renumbered (csrc/gnf_passes.c)"},
    {"union_all", (PyCFunction)words_union_all, METH_O, "WordStore.union_all (csrc/gnf_passes.c)"},
    {"epsilon_free", (PyCFunction)words_epsilon_free, METH_VARARGS, "gnf._remove_epsilon's loop (csrc/gnf_passes.c)"},
    {"lift_rule", (PyCFunction)words_lift_rule, METH_VARARGS,
     "gnf._lift_terminals's loop over one rule, one nonterminal per terminal occurrence (csrc/gnf_passes.c)"},
    {"lift_all", (PyCFunction)words_lift_all, METH_VARARGS,
     "gnf._lift_terminals's loop over every rule, one nonterminal per terminal occurrence (csrc/gnf_passes.c)"},
    /* the displacer (csrc/displace.c) and the store (csrc/store.c) */
    {"grammar", (PyCFunction)words_grammar, METH_VARARGS, "set the GNF (table, num_atoms, start); the initial node"},
    {"below_sets", (PyCFunction)words_below_sets, METH_O, "the stack adjacency as stack_below returns it"},
    {"make", (PyCFunction)words_make, METH_VARARGS, "intern (accepts, edges)"},
    {"union", (PyCFunction)words_union, METH_VARARGS, "union of two node sets"},
    {"union_many", (PyCFunction)words_union_many, METH_O, "union_many(nodes): the union of them all at once"},
    {"union_concats", (PyCFunction)words_union_concats, METH_O, "union_concats(pairs): the union of every a . b"},
    {"concat", (PyCFunction)words_concat, METH_VARARGS, "concatenation of two node sets"},
    {"step", (PyCFunction)words_step, METH_VARARGS, "Displacer.step(node, atom)"},
    {"run", (PyCFunction)words_run, METH_VARARGS, "run(node, atoms, budget=-1) -> (node, created)"},
    {"edges", (PyCFunction)words_edges, METH_O, "edges of a node as ((symbol, child), ...)"},
    {"accepts", (PyCFunction)words_accepts, METH_O, "whether a node holds the empty word"},
    {"child", (PyCFunction)words_child, METH_VARARGS, "child(node, symbol), EMPTY when absent"},
    {"reachable", (PyCFunction)words_reachable, METH_O, "reachable(roots): every node below them (WordStore.reachable)"},
    {"count", (PyCFunction)words_count, METH_O, "count(node): its words, None past 64 bits (WordStore.count)"},
    {"stats", (PyCFunction)words_stats, METH_NOARGS, "sizes of the store and its memos"},
    /* what walks the store */
    {"classify", (PyCFunction)words_classify, METH_VARARGS, "classing's vocabulary walk (csrc/classing.c)"},
    {"trie_mask", (PyCFunction)words_trie_mask, METH_VARARGS, "trie_mask(trie, state, out): a state's class set"},
    {"sigma_index", (PyCFunction)words_sigma_index, METH_VARARGS, "the sigma_in index's arrays (csrc/sigma_index.c)"},
    {"subgraph", (PyCFunction)words_subgraph, METH_VARARGS, "the nodes below roots as arrays (csrc/gnf_arrays.c)"},
    {"load_arrays", (PyCFunction)words_load_arrays, METH_VARARGS, "a fresh store's nodes from arrays (csrc/gnf_arrays.c)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef words_getset[] = {
    {"created", (getter)words_get_created, NULL, "nodes interned so far (budgets read it)", NULL},
    {"limit", (getter)words_get_limit, (setter)words_set_limit, "past this many created nodes, the budget error",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods words_as_sequence = {
    .sq_length = (lenfunc)words_len,
    .sq_item = (ssizeargfunc)words_item,
};

PyTypeObject WordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab._native.Words",
    .tp_basicsize = sizeof(Words),
    .tp_dealloc = (destructor)words_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Words(nodes, created=0, budget_exc=None): a compiled word store seeded with a WordStore's nodes",
    .tp_methods = words_methods,
    .tp_getset = words_getset,
    .tp_as_sequence = &words_as_sequence,
    .tp_init = (initproc)words_init,
    .tp_new = PyType_GenericNew,
};

/* ---- VocabTrie: the vocabulary as a trie over bytes (csrc/vocab_trie.c) ---- */
static PyMethodDef vtrie_methods[] = {
    {"info", (PyCFunction)vtrie_info, METH_NOARGS, "sizes of the trie"},
    {"same", (PyCFunction)vtrie_same, METH_VARARGS, "whether it was built from these tokens and kinds"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject VocabTrieType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab._native.VocabTrie",
    .tp_basicsize = sizeof(VocabTrie),
    .tp_dealloc = (destructor)vtrie_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "VocabTrie(token_bytes, kinds, normal=0, stop=1): the NORMAL tokens' bytes as a trie",
    .tp_methods = vtrie_methods,
    .tp_init = (initproc)vtrie_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Advancer: the native engine's accept step (csrc/step.c) ---- */
static PyMethodDef advancer_methods[] = {
    {"accept", (PyCFunction)(void (*)(void))advancer_accept, METH_FASTCALL, "accept(state, token, spent) (csrc/step.c)"},
    {"accept_state", (PyCFunction)(void (*)(void))advancer_accept_state, METH_FASTCALL,
     "accept_state(state, token, spent): accept's state alone, its node count in last_created (csrc/step.c)"},
    {"stats", (PyCFunction)advancer_stats, METH_NOARGS, "memo hits, advances, memo drops"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef advancer_getset[] = {
    {"last_created", (getter)advancer_get_last_created, NULL, "nodes the last accept_state created", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject AdvancerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab._native.Advancer",
    .tp_basicsize = sizeof(Advancer),
    .tp_dealloc = (destructor)advancer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the native engine's accept step on a compiled word store (csrc/step.c)",
    .tp_methods = advancer_methods,
    .tp_getset = advancer_getset,
    .tp_init = (initproc)advancer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the module ---- */
static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "cfgzip_lab's compiled core: word store, GNF passes, displacement, classing, sigma_in index, state step, "
    "trie mask, expansion, masking logits (see _native.pyi)",
    -1, module_functions, NULL, NULL, NULL, NULL,
};

static int add_types(PyObject *m) {
    if (PyType_Ready(&WordsType) < 0 || PyType_Ready(&VocabTrieType) < 0 || PyType_Ready(&AdvancerType) < 0)
        return -1;
    Unsupported = PyErr_NewException("cfgzip_lab._native.Unsupported", PyExc_RuntimeError, NULL);
    if (!Unsupported) return -1;
    if (PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Words", (PyObject *)&WordsType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "VocabTrie", (PyObject *)&VocabTrieType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Advancer", (PyObject *)&AdvancerType) < 0) return -1;
    if (PyModule_AddIntConstant(m, "COUNTED_SYMBOL_BITS", WIDE_BITS) < 0) return -1; /* families in the store */
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) return -1;
    return PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION);
}

PyMODINIT_FUNC PyInit__native(void) {
    mask_logits_init();
    PyObject *m = PyModule_Create(&module);
    if (m && add_types(m) < 0) Py_CLEAR(m);
    return m;
}
