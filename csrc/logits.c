/* A packed vocabulary mask applied to logits in place, for every engine (cfgzip_lab.expand.apply_vocab_bitmask_inplace;
 * XGrammar's CPU apply_token_bitmask_inplace is the reference).
 *
 * mask_logits(bitmask, bitmask_stride, logits, rows, width, elem, vocab, neg_inf)
 *   bitmask         int32 words, XGrammar's layout (bit t of the row: token t allowed)
 *   bitmask_stride  words from one bitmask row to the next (0: one row serves every logits row)
 *   logits          writable, C-contiguous rows x width elements of elem bytes (2: bf16/fp16, 4: fp32)
 *   vocab           positions [0, min(vocab, width, 32 * words of a row)) are masked; the rest stay
 *   neg_inf         the dtype's -inf bit pattern (its low elem bytes)
 * Writes -inf where a bit is 0 and leaves every other value as it was: a word of 32 refused tokens is
 * one run of 32 stores, a mixed word a select per byte of it (below). The GIL is released meanwhile, so
 * a decode loop's other thread (the next mask, the model) runs beside it.
 */
#include "words.h"

/* byte_lanes_T[b][i]: all ones where bit i of b is set. A mixed word is masked a byte (8 elements) at a
 * time through these, branch-free, which compilers vectorise with plain SSE2; a bit loop instead
 * mispredicts on real masks (bython with Llama-3: 92% of the words are mixed, a third of the bits 0). */
#define MASK_ROW(T)                                                                               \
    static T byte_lanes_##T[256][8];                                                              \
    static void init_lanes_##T(void) {                                                            \
        for (int b = 0; b < 256; b++)                                                             \
            for (int i = 0; i < 8; i++) byte_lanes_##T[b][i] = (b >> i) & 1 ? (T)~(T)0 : 0;       \
    }                                                                                             \
    static void mask_row_##T(T *restrict out, const int32_t *restrict bm, Py_ssize_t n, T neg) {  \
        Py_ssize_t full = n >> 5;                                                                 \
        for (Py_ssize_t w = 0; w < full; w++) {                                                   \
            uint32_t refused = ~(uint32_t)bm[w];                                                  \
            T *restrict base = out + (w << 5);                                                    \
            if (!refused) continue;                                                               \
            if (refused == 0xFFFFFFFFu) {                                                         \
                for (int i = 0; i < 32; i++) base[i] = neg;                                       \
                continue;                                                                         \
            }                                                                                     \
            for (int byte = 0; byte < 4; byte++) { /* fixed trip counts: vectorised */            \
                const T *restrict lanes = byte_lanes_##T[(refused >> (8 * byte)) & 0xFF];         \
                T *restrict p = base + 8 * byte;                                                  \
                for (int i = 0; i < 8; i++) p[i] = (p[i] & ~lanes[i]) | (neg & lanes[i]);         \
            }                                                                                     \
        }                                                                                         \
        if (n & 31) { /* the last, partial word: one store per refused position, none past n */  \
            uint32_t refused = ~(uint32_t)bm[full] & (((uint32_t)1 << (n & 31)) - 1);             \
            T *base = out + (full << 5);                                                          \
            while (refused) {                                                                     \
                base[__builtin_ctz(refused)] = neg;                                               \
                refused &= refused - 1;                                                           \
            }                                                                                     \
        }                                                                                         \
    }
MASK_ROW(uint16_t)
MASK_ROW(uint32_t)

PyObject *mask_logits(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bitmask, logits;
    Py_ssize_t stride, rows, width, elem, vocab;
    unsigned long long neg;
    if (!PyArg_ParseTuple(args, "y*nw*nnnnK", &bitmask, &stride, &logits, &rows, &width, &elem, &vocab, &neg))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t words = stride > 0 ? stride : bitmask.len / 4;
    Py_ssize_t n = vocab < width ? vocab : width;
    if (n > 32 * words) n = 32 * words;
    if ((elem != 2 && elem != 4) || rows < 0 || width < 0 || vocab < 0 || stride < 0 ||
        logits.len != rows * width * elem || bitmask.len % 4 || (stride > 0 && bitmask.len < rows * stride * 4) ||
        (stride == 0 && rows > 0 && words == 0)) {
        PyErr_SetString(PyExc_ValueError, "mask_logits: the bitmask and logits do not fit each other");
        goto done;
    }
    const int32_t *bm = (const int32_t *)bitmask.buf;
    char *out = (char *)logits.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows && n > 0; r++) {
        const int32_t *row_bits = bm + r * stride;
        char *row = out + r * width * elem;
        if (elem == 2)
            mask_row_uint16_t((uint16_t *)row, row_bits, n, (uint16_t)neg);
        else
            mask_row_uint32_t((uint32_t *)row, row_bits, n, (uint32_t)neg);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&bitmask);
    PyBuffer_Release(&logits);
    return result;
}

/* The lane tables mask_logits reads, once at import (module.c). */
void mask_logits_init(void) {
    init_lanes_uint16_t();
    init_lanes_uint32_t();
}
