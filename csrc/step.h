#ifndef CFGZIP_STEP_H
#define CFGZIP_STEP_H
#include "words.h"

/* The native engine's accept step (cfgzip_lab.native.walk.StateWalker.advance and the matcher's
 * token dispatch, the reference): one call per token, so that a decode step touches a few arrays
 * rather than the Python objects of a matcher, a walker and their dicts (with the caches cold, as a
 * model's forward pass leaves them, those were ~17 us of a 30 us accept on c_like). */
typedef struct {
    PyObject_HEAD
    Words *S;
    PyObject *tokens;     /* list of bytes: token_bytes */
    Py_buffer class_buf;  /* class_of's buffer, held for the Advancer's life (no copy: 512 KB of fresh
                           * pages a grammar with Llama-3, ~0.17 ms of page faults on a new schema) */
    int32_t *class_of;    /* V, in class_buf; each id checked when an accept reads it */
    Py_buffer ids_buf, classes_buf; /* or a sparse map: ids ascending (class 0 elsewhere) and their classes */
    const int32_t *ids, *classes;
    int64_t nids;
    uint8_t *class_kind;  /* K: 0 NORMAL, 1 STOP, 2 BLOCKED (ClassKind) */
    int64_t V, K;
    uint8_t atom_of[256];
    Memo memo;            /* state * K + class -> state */
    int64_t memo_entries, token_budget, request_budget;
    PyObject *budget_exc; /* StateBudgetExceeded */
    int64_t hits, advances, drops;
    int64_t last_created; /* nodes the last accept_state created (the matcher's request budget reads it) */
} Advancer;

extern PyTypeObject AdvancerType;

/* step.c */
void advancer_dealloc(Advancer *A);
int advancer_init(Advancer *A, PyObject *args, PyObject *kwds);
PyObject *advancer_accept(Advancer *A, PyObject *const *args, Py_ssize_t nargs);
PyObject *advancer_accept_state(Advancer *A, PyObject *const *args, Py_ssize_t nargs);
PyObject *advancer_get_last_created(Advancer *A, void *closure);
PyObject *advancer_stats(Advancer *A, PyObject *unused);

#endif
