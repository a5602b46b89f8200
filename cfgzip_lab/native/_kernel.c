/* The native engine's expansion kernel: a class set -> XGrammar's packed int32 vocabulary row.
 *
 * Optional (cfgzip_lab.native.rows uses its numpy path when this module is absent, and the tests
 * compare the two bit for bit). Built by `pip install -e .` / the wheel build (pyproject.toml,
 * tool.setuptools ext-modules, optional = true): a machine without a C compiler still installs.
 *
 * The same split as cfgzip_lab.kernels.cpu, without numpy's per-call costs and its 128k-byte
 * scratch row: the large classes are packed four at a time into tables of all 16 unions of their
 * rows (one OR of W words per group of four, none for a group with no class in the set), and the
 * small classes set (or clear, whichever touches fewer words) their bits directly in the packed row,
 * one precomputed (word, bits) pair per class and word.
 * Measured with Llama-3 (bython, 3,015 classes, 9,180 small-class tokens): see rows.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int in_set(const uint8_t *set, Py_ssize_t set_len, int32_t c) {
    Py_ssize_t byte = c >> 3;
    return byte < set_len && ((set[byte] >> (c & 7)) & 1);
}

/* expand_row(class_set, groups, tables, indptr, pair_words, pair_bits, small_all, out)
 *   class_set   bytes: the class set, little endian (bit k = class k)
 *   groups      int32[G * 4]: the large classes of each group (a group may repeat its last class)
 *   tables      int32[G * 16 * W]: row (g, code) = OR of the rows of the members whose bit is in code
 *   indptr      int32[K + 1]: class k's (word, bits) pairs are pair_words/pair_bits[indptr[k]:indptr[k+1]]
 *               (empty for the classes in the tables)
 *   pair_words  int32[P], pair_bits int32[P]: the words of the packed row a small class's tokens sit in,
 *               and the OR of their bits in that word
 *   small_all   int32[W]: the bits of every small class's tokens
 *   out         writable int32[W]: overwritten with the packed vocabulary row
 * Small classes: when most of their pairs are in the set, start from small_all and clear the bits of
 * the classes not in it (a token is in one class only, so no table row holds those bits); otherwise
 * set the bits of the classes in it.
 */
static PyObject *expand_row(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer set, groups, tables, indptr, words_b, bits_b, all_b, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*", &set, &groups, &tables, &indptr, &words_b, &bits_b, &all_b, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t words = out.len / 4, ngroups = groups.len / 16, nclasses = indptr.len / 4 - 1;
    const int32_t *ip = (const int32_t *)indptr.buf;
    if (tables.len != ngroups * 16 * words * 4 || all_b.len != out.len || words_b.len != bits_b.len || nclasses < 0 ||
        ip[nclasses] != words_b.len / 4 || set.len * 8 < nclasses) {
        PyErr_SetString(PyExc_ValueError, "expand_row: the tables do not fit each other or the output row");
        goto done;
    }
    const uint8_t *s = (const uint8_t *)set.buf;
    const int32_t *g = (const int32_t *)groups.buf, *t = (const int32_t *)tables.buf;
    const int32_t *pw = (const int32_t *)words_b.buf, *pb = (const int32_t *)bits_b.buf;
    const int32_t *all = (const int32_t *)all_b.buf;
    int32_t *restrict row = (int32_t *)out.buf;
    Py_ssize_t set_len = set.len;
    int filled = 0;
    for (Py_ssize_t k = 0; k < ngroups; k++) {
        int code = in_set(s, set_len, g[4 * k]) | in_set(s, set_len, g[4 * k + 1]) << 1 |
                   in_set(s, set_len, g[4 * k + 2]) << 2 | in_set(s, set_len, g[4 * k + 3]) << 3;
        if (!code) continue;
        const int32_t *restrict src = t + ((size_t)k * 16 + code) * words;
        if (!filled) {
            memcpy(row, src, (size_t)words * 4);
            filled = 1;
        } else {
            for (Py_ssize_t w = 0; w < words; w++) row[w] |= src[w];
        }
    }
    if (!filled) memset(row, 0, (size_t)words * 4);
    Py_ssize_t in_pairs = 0, total = ip[nclasses];
    for (Py_ssize_t k = 0; k < nclasses; k++)
        if ((s[k >> 3] >> (k & 7)) & 1) in_pairs += ip[k + 1] - ip[k];
    int complement = 2 * in_pairs > total;
    if (complement)
        for (Py_ssize_t w = 0; w < words; w++) row[w] |= all[w];
    for (Py_ssize_t byte = 0; byte * 8 < nclasses; byte++) {
        unsigned v = complement ? (uint8_t)~s[byte] : s[byte];
        while (v) {
            Py_ssize_t k = byte * 8 + __builtin_ctz(v);
            v &= v - 1;
            if (k >= nclasses) break;
            Py_ssize_t end = ip[k + 1];
            if (complement)
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] &= ~pb[i];
            else
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] |= pb[i];
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&set);
    PyBuffer_Release(&groups);
    PyBuffer_Release(&tables);
    PyBuffer_Release(&indptr);
    PyBuffer_Release(&words_b);
    PyBuffer_Release(&bits_b);
    PyBuffer_Release(&all_b);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"expand_row", expand_row, METH_VARARGS, "class set bytes -> packed int32 vocabulary row (see _kernel.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The native engine's compiled expansion kernel.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
