/* What fill.c reads from the other files of the native mask: the trie walk (trie.c) and the near rows
 * (expand.c), without their Python arguments. */
#ifndef CFGZIP_NATIVE_ROWS_H
#define CFGZIP_NATIVE_ROWS_H
#include "words.h"

/* trie.c: the class set of `state` in S (words uint64, zeroed first); -1 with the exception set. */
int trie_class_set(PyObject *trie_capsule, Words *S, int64_t state, uint64_t *out, Py_ssize_t words);

/* expand.c: out (words int32) = the packed vocabulary row of class set s (n64 uint64), from the nearest
 * of ncand <= NEAR_MAX candidate rows (their class sets and rows) or from scratch; the candidate it was
 * made from, -1 (from scratch), or -2 with the exception set. */
#define NEAR_MAX 64
Py_ssize_t near_rows_make(PyObject *near_capsule, const uint64_t *s, Py_ssize_t n64, int32_t *out, Py_ssize_t words,
                          const uint64_t *const *cand_sets, const int32_t *const *cand_rows, Py_ssize_t ncand);

#endif
