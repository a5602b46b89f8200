/* The functions the extension's tables name (module.c: the module's functions and the types' methods),
 * by the file that defines them. Each file's head says what its functions compute and which Python
 * function is their reference. */
#ifndef CFGZIP_METHODS_H
#define CFGZIP_METHODS_H
#include "step.h"
#include "vocab_trie.h"
#include "words.h"

/* cfg_passes.c */
PyObject *cfg_productive(PyObject *self, PyObject *args);
PyObject *cfg_reachable(PyObject *self, PyObject *args);
PyObject *cfg_byte_bits(PyObject *self, PyObject *args);
PyObject *cfg_every_symbol_productive(PyObject *self, PyObject *args);

/* serialized.c */
PyObject *serialized_rules(PyObject *self, PyObject *args);
PyObject *json_ints(PyObject *self, PyObject *args);

/* store.c */
void words_dealloc(Words *S);
int words_init(Words *S, PyObject *args, PyObject *kwds);
PyObject *words_make(Words *S, PyObject *args);
PyObject *words_union(Words *S, PyObject *args);
PyObject *words_union_many(Words *S, PyObject *arg);
PyObject *words_union_concats(Words *S, PyObject *arg);
PyObject *words_concat(Words *S, PyObject *args);
PyObject *words_step(Words *S, PyObject *args);
PyObject *words_run(Words *S, PyObject *args);
PyObject *words_edges(Words *S, PyObject *arg);
PyObject *words_accepts(Words *S, PyObject *arg);
PyObject *words_child(Words *S, PyObject *args);
PyObject *words_reachable(Words *S, PyObject *roots);
PyObject *words_count(Words *S, PyObject *arg);
Py_ssize_t words_len(Words *S);
PyObject *words_item(Words *S, Py_ssize_t i);
PyObject *words_get_created(Words *S, void *c);
PyObject *words_get_limit(Words *S, void *c);
int words_set_limit(Words *S, PyObject *v, void *c);
PyObject *words_stats(Words *S, PyObject *unused);

/* displace.c */
PyObject *words_grammar(Words *S, PyObject *args);
PyObject *words_below_sets(Words *S, PyObject *arg);

/* gnf_passes.c */
PyObject *words_map_symbols(Words *S, PyObject *args);
PyObject *words_optional(Words *S, PyObject *args);
PyObject *words_closure(Words *S, PyObject *args);
PyObject *words_reach(Words *S, PyObject *args);
PyObject *words_useless(Words *S, PyObject *args);
PyObject *words_symbols(Words *S, PyObject *roots_obj);
PyObject *words_word(Words *S, PyObject *symbols);
PyObject *words_substitute_leading(Words *S, PyObject *args);
PyObject *words_remove_units(Words *S, PyObject *args);
PyObject *words_reachable_count(Words *S, PyObject *roots_obj);
PyObject *words_count_sum(Words *S, PyObject *roots_obj);
PyObject *words_left_work(Words *S, PyObject *args);
PyObject *words_atom_rows(Words *S, PyObject *args);
PyObject *words_union_all(Words *S, PyObject *nodes_obj);
PyObject *words_lift_rule(Words *S, PyObject *args);
PyObject *words_lift_all(Words *S, PyObject *args);
PyObject *gnf_byte_atoms(PyObject *self, PyObject *bits_obj);
PyObject *words_epsilon_free(Words *S, PyObject *args);
PyObject *words_left_corner_order(Words *S, PyObject *args);

/* gnf_merge.c */
PyObject *words_below_sets_of(Words *S, PyObject *args);
PyObject *words_merge_equivalent(Words *S, PyObject *args);
PyObject *words_merge_table(Words *S, PyObject *args);

/* gnf_arrays.c */
PyObject *words_subgraph(Words *S, PyObject *args);
PyObject *words_load_arrays(Words *S, PyObject *args);

/* classing.c */
PyObject *words_classify(Words *S, PyObject *args);
PyObject *k_classify_steps(PyObject *self, PyObject *args);

/* assemble.c */
PyObject *k_assemble(PyObject *self, PyObject *args);
PyObject *k_token_nodes(PyObject *self, PyObject *args);

/* sigma_index.c */
PyObject *words_sigma_index(Words *S, PyObject *args);

/* trie.c */
PyObject *trie_new(PyObject *self, PyObject *args);
PyObject *trie_arrays(PyObject *self, PyObject *args);
PyObject *trie_mask(PyObject *self, PyObject *args);
PyObject *words_trie_mask(Words *S, PyObject *args);

/* fill.c */
PyObject *filler_new(PyObject *self, PyObject *args);
PyObject *fill_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *filler_stats(PyObject *self, PyObject *capsule);

/* expand.c */
PyObject *expand_row(PyObject *self, PyObject *args);
PyObject *below_sparse_limit(PyObject *self, PyObject *arg);
PyObject *near_rows_new(PyObject *self, PyObject *args);
PyObject *expand_near(PyObject *self, PyObject *args);
PyObject *near_rows_stats(PyObject *self, PyObject *capsule);
PyObject *expansion_tables(PyObject *self, PyObject *args);
PyObject *mask_logits(PyObject *self, PyObject *args);
void mask_logits_init(void); /* once, before mask_logits */

#endif
