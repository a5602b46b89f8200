/* The numbering of the displacement classes (cfgzip_lab.classes.classing._assemble, the reference): from
 * classing's walk (classing.c) to class_of, the representatives and their nodes; and every token's node
 * from its class (token_nodes). */
#include "vocab_trie.h"

/* assemble(trie, kinds, node_of, fallback, class_of, normal, stop, nodes=-1, ranges=None) -> (reps int32 bytes,
 * kinds uint8 bytes, dead, blocked, rep_nodes int64 bytes, ids, classes): classing._assemble over arrays (with classify's
 * ranges and the node count, from those tokens alone, node_of not read: assemble_ranges). BLOCKED first
 * (special and empty tokens, dead ones: node_of 0), STOP next, then one class per displacement node (a
 * fallback token alone), numbered by representative id; a representative is the shortest member, ties
 * to the lowest id; the BLOCKED class's is its shortest dead token when it has one. rep_nodes: each
 * representative's node (what node_of holds for it). class_of: writable int32[V], or None: the short way
 * alone, which then writes no map (None returned where it does not apply: give a map). ids, classes: the
 * short way's ids outside class 0 (BLOCKED there), ascending, and their classes, int32 bytes (the whole
 * map: every other id is class 0, TokenClasses.from_sparse); None the long way. */
static int cmp_int32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* assemble's short way, from the walk's ranges: only the tokens with a live node or a fallback are
 * read; every other token's class is known from the vocabulary (special, empty and dead tokens
 * BLOCKED, class 0; STOP tokens class 1), so the ~128k dead tokens of a small grammar cost one
 * memset, not a pass reading five arrays per token (0.17 ms of a one-word schema's ~0.4 ms classing
 * with Llama-3). The same classes and representatives as the long way. NULL with no error set where
 * it does not apply (no BLOCKED class, where STOP would be class 0): the caller takes the long way. */
static int cmp_u64_keys(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* keys (n, each a distinct id < 2^31 in its high 32 bits) sorted by id, in place: LSD radix passes of 11 bits
 * over the ids' bits (ids < ntok), through tmp (n keys). qsort of ~1,700 such keys (a small schema's listed ids
 * with Llama-3) was ~90% of a ~100 µs numbering; two passes over them are a few µs. The ids being distinct,
 * the order is qsort's. */
static void sort_by_id(uint64_t *keys, uint64_t *tmp, int64_t n, int64_t ntok) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    int64_t count[BUCKETS];
    uint64_t *src = keys, *dst = tmp;
    for (int shift = 32; shift < 64 && (ntok - 1) >> (shift - 32) > 0; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[(src[i] >> shift) & (BUCKETS - 1)]++;
        int64_t at = 0;
        for (int b = 0; b < BUCKETS; b++) {
            int64_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & (BUCKETS - 1)]++] = src[i];
        uint64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != keys) memcpy(keys, src, (size_t)n * sizeof(uint64_t));
}

/* The NORMAL classes numbered from `first` in the order of their representatives: group g's class cls[g],
 * and each class's representative, kind and node. order: scratch for ng keys. */
static void number_range_groups(int64_t ng, const int32_t *rep, const int64_t *group_node, int64_t first,
                                uint64_t *order, int32_t *cls, int32_t *reps, uint8_t *kout, int64_t *rep_nodes) {
    for (int64_t g = 0; g < ng; g++) order[g] = ((uint64_t)(uint32_t)rep[g] << 32) | (uint32_t)g;
    qsort(order, (size_t)ng, sizeof(uint64_t), cmp_u64_keys);
    for (int64_t i = 0; i < ng; i++) {
        int32_t g = (int32_t)(order[i] & 0xFFFFFFFFu);
        cls[g] = (int32_t)(first + i);
        reps[first + i] = rep[g];
        kout[first + i] = 0; /* ClassKind.NORMAL */
        rep_nodes[first + i] = group_node[g];
    }
}

/* The groups, from the walk's ranges alone (both ways that read them): one per displacement node and one per fallback token, each
 * group's least rank (T->trank: its representative, the shortest member, ties to the lowest id, is
 * by_length[rank]) read from a range's contiguous run of ranks in trie order (no token's length looked up by
 * id), and each range's group (a fallback range's first). group_of_node: -1 for every node on entry. -1 when
 * out of memory. */
static int range_groups(const VocabTrie *T, const Range *rs, int64_t nr, int32_t *group_of_node, int32_t **rank,
                        int64_t *rankcap, int64_t **group_node, int64_t *groupcap, int64_t *ng, int32_t *range_group) {
    const int32_t *trank = T->trank;
    for (int64_t i = 0; i < nr; i++) {
        int64_t node = rs[i].node, n = rs[i].hi - rs[i].lo;
        int64_t need = *ng + (node < 0 ? n : 1);
        if (need > *rankcap && grow((void **)rank, rankcap, need, sizeof(int32_t)) < 0) return -1;
        if (need > *groupcap && grow((void **)group_node, groupcap, need, sizeof(int64_t)) < 0) return -1;
        if (node < 0) { /* fallback tokens: a group each */
            range_group[i] = (int32_t)*ng;
            for (int32_t k = rs[i].lo; k < rs[i].hi; k++) {
                (*rank)[*ng] = trank[k];
                (*group_node)[(*ng)++] = -1;
            }
            continue;
        }
        int32_t least = INT32_MAX, lo = rs[i].lo, hi = rs[i].hi;
        for (int32_t k = lo; k < hi; k++) least = trank[k] < least ? trank[k] : least;
        int32_t g = group_of_node[node];
        if (g < 0) {
            g = group_of_node[node] = (int32_t)(*ng)++;
            (*rank)[g] = least;
            (*group_node)[g] = node;
        } else if (least < (*rank)[g]) {
            (*rank)[g] = least;
        }
        range_group[i] = g;
    }
    return 0;
}

/* Each range's tokens given their class in the map (zeroed first: BLOCKED, class 0, where a token is in no
 * range), the ids scattered from the trie's order. */
static void dense_scatter(const VocabTrie *T, const Range *rs, int64_t nr, const int32_t *range_group,
                          const int32_t *cls, int32_t *out) {
    const int32_t *restrict ttok = T->ttok;
    int32_t *restrict map = out;
    memset(map, 0, (size_t)T->ntok * sizeof(int32_t));
    for (int64_t i = 0; i < nr; i++) {
        int32_t g = range_group[i], lo = rs[i].lo, hi = rs[i].hi;
        if (rs[i].node < 0) { /* fallback tokens: consecutive groups */
            for (int32_t k = lo; k < hi; k++) map[ttok[k]] = cls[g++];
        } else {
            int32_t c = cls[g];
            for (int32_t k = lo; k < hi; k++) map[ttok[k]] = c;
        }
    }
}

/* assemble's dense way from the ranges: most tokens live (a JSON Schema's ~125k of Llama-3's 128k), so the map
 * is written whole: the groups and their representatives from the ranges in trie order (range_groups), the
 * classes numbered, then each range's class scattered into the map once (dense_scatter; no node_of read: a lazy
 * walk did not write it). The same classes, representatives and rep_nodes as the long way (assemble_long),
 * BLOCKED or not. */
static PyObject *assemble_dense(VocabTrie *T, const uint8_t *fb, int32_t *out, const Range *rs, int64_t nr, int64_t top,
                                int64_t dead) {
    PyObject *result = NULL, *reps_b = NULL, *kinds_b = NULL, *nodes_b = NULL;
    int64_t blocked = T->nfixed_blocked + dead, ng = 0, rankcap = 0, groupcap = 0;
    int32_t *group_of_node = malloc((size_t)(top + 1) * sizeof(int32_t)), *rep = NULL, *cls = NULL, *rank = NULL;
    int32_t *range_group = malloc((size_t)(nr ? nr : 1) * sizeof(int32_t));
    int64_t *group_node = NULL;
    uint64_t *order = NULL;
    if (!group_of_node || !range_group) goto nomem;
    memset(group_of_node, 0xFF, (size_t)(top + 1) * sizeof(int32_t));
    if (range_groups(T, rs, nr, group_of_node, &rank, &rankcap, &group_node, &groupcap, &ng, range_group) < 0)
        goto nomem;
    int64_t first = (blocked > 0) + (T->nstops > 0), k_total = first + ng;
    rep = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    cls = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    order = malloc((size_t)(ng ? ng : 1) * sizeof(uint64_t));
    reps_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 4));
    kinds_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k_total);
    nodes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 8));
    if (!rep || !cls || !order || !reps_b || !kinds_b || !nodes_b) goto nomem;
    for (int64_t g = 0; g < ng; g++) rep[g] = T->by_length[rank[g]];
    int32_t *reps = (int32_t *)PyBytes_AS_STRING(reps_b);
    uint8_t *kout = (uint8_t *)PyBytes_AS_STRING(kinds_b);
    int64_t *rep_nodes = (int64_t *)PyBytes_AS_STRING(nodes_b);
    number_range_groups(ng, rep, group_node, first, order, cls, reps, kout, rep_nodes);
    dense_scatter(T, rs, nr, range_group, cls, out);
    /* the dead representative: the shortest trie token in no range (class 0 there: every range's class is
     * past BLOCKED, which exists where a token is dead), not a fallback, the first of equals */
    int64_t dead_rep = -1;
    for (int64_t i = 0; dead && i < T->eligible; i++) {
        int32_t t = T->by_length[i];
        if (out[t] == 0 && !fb[t]) {
            dead_rep = t;
            break;
        }
    }
    if (dead && dead_rep < 0) {
        PyErr_SetString(PyExc_RuntimeError, "assemble: the dead tokens the ranges leave are all fallbacks");
        goto done;
    }
    int64_t k = 0;
    if (blocked) {
        reps[k] = (int32_t)(dead_rep >= 0 ? dead_rep : T->fixed_blocked_min);
        rep_nodes[k] = dead_rep >= 0 ? W_EMPTY : -1;
        kout[k++] = 2; /* ClassKind.BLOCKED */
    }
    int32_t stop_class = (int32_t)k;
    if (T->nstops) {
        reps[k] = (int32_t)T->stop_rep;
        rep_nodes[k] = -1;
        kout[k++] = 1; /* ClassKind.STOP */
    }
    for (int64_t i = 0; i < T->nstops; i++) out[T->stop_ids[i]] = stop_class;
    result = Py_BuildValue("NNLLNOO", reps_b, kinds_b, (long long)dead, (long long)blocked, nodes_b, Py_None, Py_None);
    reps_b = kinds_b = nodes_b = NULL;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(reps_b);
    Py_XDECREF(kinds_b);
    Py_XDECREF(nodes_b);
    free(group_of_node);
    free(range_group);
    free(group_node);
    free(rank);
    free(rep);
    free(cls);
    free(order);
    return result;
}

/* Whether the ranges' tokens are enough that the map is written whole (assemble_dense): past a quarter of the
 * vocabulary, where the list of ids outside class 0 (sorted) costs more than the map, and a dense array no more. */
static inline int n_in_dense(const VocabTrie *T, int64_t n_in) { return n_in > T->ntok / 4; }

static PyObject *assemble_ranges(VocabTrie *T, const uint8_t *fb, int32_t *out, const Range *rs, int64_t nr,
                                 int64_t top) {
    int64_t live = 0, fallbacks = 0;
    for (int64_t i = 0; i < nr; i++) {
        if (rs[i].lo < 0 || rs[i].hi < rs[i].lo || rs[i].hi > T->eligible || rs[i].node > top ||
            (rs[i].node <= W_EMPTY && rs[i].node != -1)) {
            PyErr_SetString(PyExc_ValueError, "assemble: the walk's ranges do not fit this trie and store");
            return NULL;
        }
        if (rs[i].node < 0)
            fallbacks += rs[i].hi - rs[i].lo;
        else
            live += rs[i].hi - rs[i].lo;
    }
    int64_t dead = T->eligible - live - fallbacks, blocked = T->nfixed_blocked + dead;
    if (dead < 0) {
        PyErr_SetString(PyExc_ValueError, "assemble: the walk's ranges hold more tokens than the trie");
        return NULL;
    }
    /* most tokens in the ranges: the dense way into the map, or (none given) None from k_assemble: give one */
    if (n_in_dense(T, live + fallbacks)) return out ? assemble_dense(T, fb, out, rs, nr, top, dead) : NULL;
    if (blocked == 0) return NULL;
    PyObject *result = NULL, *reps_b = NULL, *kinds_b = NULL, *nodes_b = NULL, *ids_b = NULL, *classes_b = NULL;
    int64_t n_in = live + fallbacks, nl = n_in + T->nstops;
    int32_t *group_of_node = malloc((size_t)(top + 1) * sizeof(int32_t)), *rep = NULL, *cls = NULL, *by_rep = NULL;
    int32_t *range_group = malloc((size_t)(nr ? nr : 1) * sizeof(int32_t)), *rank = NULL;
    uint64_t *pairs = malloc((size_t)(nl ? nl : 1) * sizeof(uint64_t));
    int64_t *group_node = NULL, groupcap = 0;
    uint64_t *in_range = NULL;
    if (!group_of_node || !range_group || !pairs) goto nomem;
    memset(group_of_node, 0xFF, (size_t)(top + 1) * sizeof(int32_t));
    const int32_t *ttok = T->ttok;
    int64_t ng = 0, rankcap = 0;
    if (range_groups(T, rs, nr, group_of_node, &rank, &rankcap, &group_node, &groupcap, &ng, range_group) < 0)
        goto nomem;
    /* The dead representative: the shortest trie token in no range (neither live nor a fallback), the
     * first of equals; read from the ranges, not node_of, which a lazy walk did not write. */
    int64_t dead_rep = -1;
    if (dead) {
        in_range = calloc((size_t)(T->ntok / 64 + 1), sizeof(uint64_t));
        if (!in_range) goto nomem;
        for (int64_t i = 0; i < nr; i++)
            for (int32_t k = rs[i].lo; k < rs[i].hi; k++) in_range[ttok[k] >> 6] |= (uint64_t)1 << (ttok[k] & 63);
    }
    for (int64_t i = 0; dead && i < T->eligible; i++) {
        int32_t t = T->by_length[i];
        if (!((in_range[t >> 6] >> (t & 63)) & 1) && !fb[t]) {
            dead_rep = t;
            break;
        }
    }
    if (dead && dead_rep < 0) {
        PyErr_SetString(PyExc_RuntimeError, "assemble: the dead tokens the ranges leave are all fallbacks");
        goto done;
    }
    int64_t first = 1 + (T->nstops > 0), k_total = first + ng;
    rep = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    cls = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    by_rep = malloc((size_t)(ng ? ng : 1) * sizeof(int64_t));
    reps_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 4));
    kinds_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k_total);
    nodes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 8));
    ids_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nl * 4));
    classes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nl * 4));
    if (!rep || !cls || !by_rep || !reps_b || !kinds_b || !nodes_b || !ids_b || !classes_b) goto nomem;
    for (int64_t g = 0; g < ng; g++) rep[g] = T->by_length[rank[g]];
    int32_t *reps = (int32_t *)PyBytes_AS_STRING(reps_b);
    uint8_t *kout = (uint8_t *)PyBytes_AS_STRING(kinds_b);
    int64_t *rep_nodes = (int64_t *)PyBytes_AS_STRING(nodes_b);
    reps[0] = (int32_t)(dead_rep >= 0 ? dead_rep : T->fixed_blocked_min);
    kout[0] = 2; /* ClassKind.BLOCKED */
    rep_nodes[0] = dead_rep >= 0 ? W_EMPTY : -1;
    if (T->nstops) {
        reps[1] = (int32_t)T->stop_rep;
        kout[1] = 1; /* ClassKind.STOP */
        rep_nodes[1] = -1;
    }
    uint64_t *order = (uint64_t *)by_rep;
    number_range_groups(ng, rep, group_node, first, order, cls, reps, kout, rep_nodes);
    /* the ids outside class 0 (BLOCKED) with their classes, ascending by id: the whole map with class 0
     * for every other id (written into `out` too where the caller gave one) */
    int64_t np_ = 0;
    for (int64_t i = 0; i < nr; i++) {
        int32_t g = range_group[i], fallback = rs[i].node < 0; /* fallback tokens: consecutive groups */
        for (int32_t k = rs[i].lo; k < rs[i].hi; k++, g += fallback)
            pairs[np_++] = ((uint64_t)(uint32_t)ttok[k] << 32) | (uint32_t)cls[g];
    }
    for (int64_t i = 0; i < T->nstops; i++) pairs[np_++] = ((uint64_t)(uint32_t)T->stop_ids[i] << 32) | 1u;
    uint64_t *sort_tmp = malloc((size_t)(nl ? nl : 1) * sizeof(uint64_t));
    if (!sort_tmp) goto nomem;
    sort_by_id(pairs, sort_tmp, nl, T->ntok);
    free(sort_tmp);
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(ids_b), *classes = (int32_t *)PyBytes_AS_STRING(classes_b);
    for (int64_t i = 0; i < nl; i++) {
        ids[i] = (int32_t)(pairs[i] >> 32);
        classes[i] = (int32_t)(pairs[i] & 0xFFFFFFFFu);
    }
    if (out) {
        memset(out, 0, (size_t)T->ntok * sizeof(int32_t));
        for (int64_t i = 0; i < nl; i++) out[ids[i]] = classes[i];
    }
    result = Py_BuildValue("NNLLNNN", reps_b, kinds_b, (long long)dead, (long long)blocked, nodes_b, ids_b, classes_b);
    reps_b = kinds_b = nodes_b = ids_b = classes_b = NULL;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(reps_b);
    Py_XDECREF(kinds_b);
    Py_XDECREF(nodes_b);
    Py_XDECREF(ids_b);
    Py_XDECREF(classes_b);
    free(group_node);
    free(in_range);
    free(group_of_node);
    free(range_group);
    free(rank);
    free(pairs);
    free(rep);
    free(cls);
    free(by_rep);
    return result;
}

/* The long way's groups: one per displacement node (and per fallback token), each token's group kept in the
 * output row until the classes are numbered (-1 BLOCKED, -2 STOP; no scratch array of the vocabulary's size). */
typedef struct {
    int32_t *group, *rep, *group_of_node; /* group: the output row; rep: each group's representative */
    int64_t repcap, ng, top;
    int64_t blocked, stops, dead, blocked_min, dead_rep, stop_rep;
} Groups;

/* Each token's group, the groups' representatives (the shortest member, the first of equals) and the
 * BLOCKED and STOP classes' counts and representatives; -1 with the exception set. */
static int group_tokens(Groups *G, VocabTrie *T, const uint8_t *kd, const uint8_t *fb, const int64_t *no, int normal,
                        int stop) {
    const int32_t *len = T->len;
    int32_t *group = G->group;
    /* the shortest dead and stop tokens (the first of equals) with their lengths in locals: a
     * comparison through len[rep] on every dead token kept rep in memory, a dependency from one
     * token to the next (0.32 ms of a ~0.75 ms classing of a one-word schema with Llama-3) */
    int32_t dead_len = INT32_MAX, stop_len = INT32_MAX;
    for (int64_t t = 0; t < T->ntok; t++) {
        uint8_t kt = kd[t];
        int32_t lt = len[t];
        if (kt == normal && lt != 0 && !fb[t]) {
            int64_t nt = no[t];
            if (nt == W_EMPTY) {
                group[t] = -1;
                G->blocked++;
                if (G->blocked_min < 0) G->blocked_min = t;
                G->dead++;
                if (lt < dead_len) {
                    dead_len = lt;
                    G->dead_rep = t;
                }
                continue;
            }
            if (nt < 0 || nt > G->top) {
                PyErr_Format(PyExc_ValueError, "assemble: token %lld has no displacement node", (long long)t);
                return -1;
            }
            int32_t g = G->group_of_node[nt];
            if (g < 0) {
                if (G->ng >= G->repcap && grow((void **)&G->rep, &G->repcap, G->ng + 1, sizeof(int32_t)) < 0) goto nomem;
                g = (int32_t)G->ng++;
                G->rep[g] = (int32_t)t;
                G->group_of_node[nt] = g;
            } else if (lt < len[G->rep[g]]) {
                G->rep[g] = (int32_t)t;
            }
            group[t] = g;
        } else if (kt == stop) {
            G->stops++;
            if (lt < stop_len) {
                stop_len = lt;
                G->stop_rep = t;
            }
            group[t] = -2;
        } else if (kt != normal || lt == 0) {
            group[t] = -1;
            G->blocked++;
            if (G->blocked_min < 0) G->blocked_min = t;
        } else { /* a fallback token: a class of its own */
            if (G->ng >= G->repcap && grow((void **)&G->rep, &G->repcap, G->ng + 1, sizeof(int32_t)) < 0) goto nomem;
            G->rep[G->ng] = (int32_t)t;
            group[t] = (int32_t)G->ng++;
        }
    }
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The classes numbered: BLOCKED first, STOP next, then the groups in the order of their representatives;
 * class_of written over the groups. The tuple assemble returns, or NULL with the exception set. */
static PyObject *number_groups(const Groups *G, int64_t v, const int64_t *no) {
    int64_t ng = G->ng, first = (G->blocked > 0) + (G->stops > 0), k_total = first + ng, k = 0;
    int32_t *cls = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t)), *by_rep = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    PyObject *reps_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 4));
    PyObject *kinds_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k_total), *nodes_b = NULL, *result = NULL;
    if (!cls || !by_rep || !reps_b || !kinds_b) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int32_t *reps = (int32_t *)PyBytes_AS_STRING(reps_b), *out = G->group;
    uint8_t *kout = (uint8_t *)PyBytes_AS_STRING(kinds_b);
    if (G->blocked) {
        reps[k] = (int32_t)(G->dead_rep >= 0 ? G->dead_rep : G->blocked_min);
        kout[k++] = 2; /* ClassKind.BLOCKED */
    }
    if (G->stops) {
        reps[k] = (int32_t)G->stop_rep;
        kout[k++] = 1; /* ClassKind.STOP */
    }
    /* NORMAL classes in the order of their representatives: the groups sorted by rep (a pass over the
     * vocabulary looking for reps cost a third of the numbering) */
    for (int64_t g = 0; g < ng; g++) by_rep[g] = G->rep[g];
    qsort(by_rep, (size_t)ng, sizeof(int32_t), cmp_int32);
    for (int64_t i = 0; i < ng; i++) {
        int32_t t = by_rep[i];
        cls[G->group[t]] = (int32_t)k;
        reps[k] = t;
        kout[k++] = 0; /* ClassKind.NORMAL */
    }
    for (int64_t t = 0; t < v; t++) {
        int32_t g = G->group[t];
        out[t] = g >= 0 ? cls[g] : g == -2 ? (int32_t)(G->blocked > 0) : 0;
    }
    nodes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 8));
    if (!nodes_b) goto done;
    for (int64_t i = 0; i < k_total; i++) ((int64_t *)PyBytes_AS_STRING(nodes_b))[i] = no[reps[i]];
    result = Py_BuildValue("NNLLNOO", reps_b, kinds_b, (long long)G->dead, (long long)G->blocked, nodes_b, Py_None,
                           Py_None);
    reps_b = kinds_b = NULL; /* Py_BuildValue took them ("N"), or released them on failure */
done:
    Py_XDECREF(reps_b);
    Py_XDECREF(kinds_b);
    free(cls);
    free(by_rep);
    return result;
}

/* The long way: every token read. Node ids are a store's dense ids: a table from node to group (a hash per
 * token cost 0.4 ms of a JSON Schema's ~1 ms numbering with Llama-3). */
static PyObject *assemble_long(VocabTrie *T, const uint8_t *kd, const uint8_t *fb, const int64_t *no, int32_t *out,
                               int normal, int stop, long long nodes) {
    Groups G = {out, NULL, NULL, 0, 0, nodes - 1, 0, 0, 0, -1, -1, -1};
    PyObject *result = NULL;
    if (nodes < 1) { /* `nodes`: the store's node count, when the caller knows it (one pass less) */
        G.top = 0;
        for (int64_t t = 0; t < T->ntok; t++)
            if (no[t] > G.top) G.top = no[t];
    }
    if (G.top >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "assemble: a displacement node id past int32");
        return NULL;
    }
    G.group_of_node = malloc((size_t)(G.top + 1) * sizeof(int32_t));
    if (!G.group_of_node) return PyErr_NoMemory();
    memset(G.group_of_node, 0xFF, (size_t)(G.top + 1) * sizeof(int32_t));
    if (group_tokens(&G, T, kd, fb, no, normal, stop) == 0) result = number_groups(&G, T->ntok, no);
    free(G.rep);
    free(G.group_of_node);
    return result;
}

PyObject *k_assemble(PyObject *self, PyObject *args) {
    (void)self;
    VocabTrie *T;
    Py_buffer kinds, node_of, fallback, class_of = {0};
    int normal, stop;
    long long nodes = -1;
    PyObject *ranges = Py_None, *class_of_obj;
    if (!PyArg_ParseTuple(args, "O!y*y*y*Oii|LO", &VocabTrieType, &T, &kinds, &node_of, &fallback, &class_of_obj,
                          &normal, &stop, &nodes, &ranges))
        return NULL;
    PyObject *result = NULL;
    int64_t v = T->ntok;
    int sparse = class_of_obj == Py_None; /* no map: the short way's ids and classes alone, or None */
    if (!sparse && PyObject_GetBuffer(class_of_obj, &class_of, PyBUF_WRITABLE) < 0) goto done;
    if (kinds.len != v || node_of.len != v * 8 || fallback.len != v || (!sparse && class_of.len != v * 4)) {
        PyErr_SetString(PyExc_ValueError, "assemble: arrays do not fit the vocabulary");
        goto done;
    }
    const uint8_t *kd = kinds.buf, *fb = fallback.buf;
    /* the walk's ranges, for this trie's own kinds: the short way (assemble_ranges) */
    if (ranges != Py_None && nodes >= 1 && normal == T->normal && stop == T->stop &&
        memcmp(kd, T->kinds, (size_t)v) == 0) {
        if (!PyBytes_Check(ranges) || PyBytes_GET_SIZE(ranges) % (Py_ssize_t)sizeof(Range)) {
            PyErr_SetString(PyExc_TypeError, "assemble: ranges must be the bytes classify returned");
            goto done;
        }
        result = assemble_ranges(T, fb, sparse ? NULL : class_of.buf, (const Range *)PyBytes_AS_STRING(ranges),
                                 PyBytes_GET_SIZE(ranges) / (Py_ssize_t)sizeof(Range), nodes - 1);
        if (result || PyErr_Occurred()) goto done;
    }
    if (sparse) /* the short way does not apply: the caller gives a map and takes the long way */
        result = Py_NewRef(Py_None);
    else
        result = assemble_long(T, kd, fb, node_of.buf, class_of.buf, normal, stop, nodes);
done:
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&node_of);
    PyBuffer_Release(&fallback);
    if (class_of.obj) PyBuffer_Release(&class_of);
    return result;
}

/* token_nodes(trie, class_of int32[V], class_kind uint8[K], rep_nodes int64[K], out int64[V]): every token's
 * displacement node from its class, as classify writes node_of, for a lazy walk that kept its ranges (and
 * so did not write it): a NORMAL or STOP class's tokens share their representative's node (one class per
 * node), the BLOCKED class holds the dead trie tokens (the empty set) and the tokens outside the trie (-1). */
PyObject *k_token_nodes(PyObject *self, PyObject *args) {
    (void)self;
    VocabTrie *T;
    Py_buffer co, ck, rn, out;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &VocabTrieType, &T, &co, &ck, &rn, &out)) return NULL;
    PyObject *result = NULL;
    int64_t v = T->ntok, k = ck.len;
    if (co.len != v * 4 || out.len != v * 8 || rn.len != k * 8) {
        PyErr_SetString(PyExc_ValueError, "token_nodes: arrays do not fit the vocabulary and the classes");
        goto done;
    }
    const int32_t *c = co.buf;
    const uint8_t *kind = ck.buf, *eligible = T->eligible_of;
    const int64_t *rep_nodes = rn.buf;
    int64_t *o = out.buf;
    for (int64_t t = 0; t < v; t++) {
        if ((uint32_t)c[t] >= (uint64_t)k) {
            PyErr_SetString(PyExc_ValueError, "token_nodes: class_of has ids outside [0, num_classes)");
            goto done;
        }
        o[t] = kind[c[t]] == 2 ? (int64_t)(eligible[t] != 0) - 1 : rep_nodes[c[t]]; /* ClassKind.BLOCKED */
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&co);
    PyBuffer_Release(&ck);
    PyBuffer_Release(&rn);
    PyBuffer_Release(&out);
    return result;
}
