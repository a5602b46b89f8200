/* What the two halves of the compiled kernel share (one extension module, cfgzip_lab.native._kernel):
 * _kernel.c (expansion, masking logits, the sigma_in trie as arrays) and _words.c (the word store,
 * displacement, classing's vocabulary walk, the sigma_in index build, the state step). */
#ifndef CFGZIP_KERNEL_H
#define CFGZIP_KERNEL_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The sigma_in trie as arrays (see trie_new in _kernel.c). */
typedef struct {
    Py_buffer ptr, syms, kids, dense_idx, dense, list_ptr, list_cls;
    Py_ssize_t nodes, words;
} Trie;

/* OR the class set of trie node nt into out (uint64[t->words]). */
static inline void trie_or_classes(const Trie *t, Py_ssize_t nt, uint64_t *out) {
    const int32_t *di = (const int32_t *)t->dense_idx.buf;
    if (di[nt] >= 0) {
        const uint64_t *row = (const uint64_t *)t->dense.buf + (size_t)di[nt] * t->words;
        for (Py_ssize_t w = 0; w < t->words; w++) out[w] |= row[w];
    } else {
        const int32_t *lp = (const int32_t *)t->list_ptr.buf, *lc = (const int32_t *)t->list_cls.buf;
        for (Py_ssize_t k = lp[nt]; k < lp[nt + 1]; k++) out[lc[k] >> 6] |= (uint64_t)1 << (lc[k] & 63);
    }
}

/* Adds the word store's types and functions to the module (_words.c); -1 with an exception set. */
int words_add_to_module(PyObject *module);

#endif
