/* The normal form's passes over rule sets, in C (on the store of words.c).
 *
 * cfgzip_lab.grammar.gnf is the reference: every function here is one of its memoised walks over the
 * rule sets' DAGs, and creates its nodes in the order the Python walk does (children in edge order
 * before their parent, unions in edge order), so that a normal form built in a compiled store has
 * the nodes, under the same ids, of one built in a WordStore (tests/test_compiled.py checks this
 * node for node, and tests/test_gnf_passes.py each pass against its Python walk). The Python walks
 * spent most of a JSON Schema's normal form on tuples made per node visited.
 *
 *   map_symbols(roots, to, memo) -> [node]   gnf._map_symbols: every word with each symbol s in
 *       0 <= s < len(to) replaced by to[s] (edges with to[s] == DROP dropped, other symbols kept),
 *       children mapped first in edge order; edges that meet in one symbol united in edge order.
 *   optional(roots, nullable, memo) -> [node] gnf._remove_epsilon's opt: every word with any subset
 *       of its nullable occurrences (nullable: bytes, 1 per nonterminal) deleted.
 *   closure(nts, roots, m, generating) -> [nt] gnf._closure: the least fixpoint.
 *   reach(roots, start[, items]) -> [nt]     gnf._remove_useless's REACHABLE (roots[a]: a's rule set
 *       or -1; items[f]: family f's item, which a member F_c names).
 *   symbols(roots) -> {symbol}               gnf._symbols_named.
 *   useless(nts, roots, m, start[, items])   gnf._remove_useless where it restricts nothing (else None):
 *       GENERATING (a family member counts), then REACHABLE (as reach); the nonterminals kept, in order.
 *   word(symbols) -> node                    WordStore.word (the lifting makes one per alternative).
 *   below_sets_of(rows, start, bottom)       gnf.stack_below without families (None past 128 MB; gnf_merge.c, gnf_below.c).
 *   left_corner_order(nts, roots, m)         gnf._left_corner_order (Tarjan, the Python walk's order).
 *   merge_equivalent(atoms, tails, start)    gnf._merge_equivalent without families: the whole partition
 *       refinement (its stack adjacency too), the renamed tails made in the Python walk's order (gnf_merge.c).
 *   merge_table(table, start[, items, bounds]) merge_equivalent on the table's dicts, the merged rows as dicts;
 *       with counted-repetition families merged too, as gnf._merge_equivalent does (gnf_merge.c).
 *   substitute_leading(seq, roots, at)       gnf._substitute_all_leading (a family member never leads a word).
 *   remove_units(nts, roots, m, at)          gnf._remove_units (likewise: a member is never a unit).
 *   reachable_count(roots), count_sum(roots) the normal form's sizes (len(reachable), sum of counts).
 *   left_work(order, roots, m) -> bytes      the nonterminals gnf._remove_left_recursion changes.
 *   atom_rows(roots, to, memo) -> [dict]     gnf._to_gnf's table: {atom: tail mapped through to} per root.
 *   union_all(nodes) -> node                 WordStore.union_all (the lifting unites each rule's words).
 *   epsilon_free(nts, roots, nullable, memo, at) gnf._remove_epsilon's loop: optional, then without ε.
 *   lift_rule(alts, spans, ids, shapes, shape_of, names, origins, rule_sets, name, rule) -> node
 *       gnf._lift_terminals's loop over one rule (one nonterminal per terminal occurrence).
 *   lift_all(rules, counted, live, symbol_spans, cfg_origins, ids, shapes, shape_of, kept, names, origins,
 *       rule_sets, deadline)                 the same loop over every rule, in one call.
 *   gnf_byte_atoms(bits) -> (atoms' bits, atom_of) or None (a module function) cfg.byte_classes, gnf._partition.
 * memo: a writable int32 buffer, -1 where unknown, indexed by the nodes walked (a node past its end
 * is walked without one); the caller keeps it between calls of one pass.
 */

#include "gnf_passes.h"
#include "methods.h" /* words_make */
#include "run_merge_sort.h"

/* A renamed edge as gnf_map groups them: (symbol, child, position), sorted by symbol, then position (the
 * keys are distinct, so this is the order qsort through a comparator gave, which was ~25% of a counted
 * schema's merging: Snowplow sp_333's renamed tails meet in one block by the hundred). */
typedef struct {
    int64_t sym, kid, pos;
} EdgeTriple;

#define EDGE_BEFORE(x, y) ((x)->sym < (y)->sym || ((x)->sym == (y)->sym && (x)->pos < (y)->pos))
RUN_MERGE_SORT(sort_edge_triples, EdgeTriple, EDGE_BEFORE)

int64_t gnf_map(Words *S, GnfPass *P, int64_t node, int depth) {
    if (node < P->mlen && P->memo[node] >= 0) return P->memo[node];
    if (node <= W_EPSILON) return node;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t e0 = S->estart[node], e1 = S->estart[node + 1];
    int accepts = S->acc[node];
    int64_t base = S->stop;
    int sorted = 1;
    for (int64_t i = e0; i < e1; i++) {
        int64_t s = S->esym[i], c = S->ekid[i], ns = s;
        if (s >= 0 && s < P->m) {
            ns = P->to[s];
            if (ns == GNF_DROP) continue;
        } else if (P->nfto && s >= FAMILY_BASE && s < WIDE_IN && ((s - FAMILY_BASE) >> 32) < P->nfto) {
            ns = member_sym(P->fto[(s - FAMILY_BASE) >> 32], (s - FAMILY_BASE) & 0xFFFFFFFF);
        }
        int64_t rc = gnf_map(S, P, c, depth + 1);
        if (rc < 0) {
            S->stop = base;
            return rc;
        }
        if (rc == W_EMPTY) continue;
        if (S->stop > base && S->ssym[S->stop - 1] >= ns) sorted = 0;
        if (push_edge(S, ns, rc) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    int64_t r;
    if (sorted) {
        r = make_scratch(S, accepts, base);
    } else {
        /* Edges that meet in one symbol: group them (sort (symbol, position)), then unite each group's
         * children in EDGE order across groups, as the Python walk does (unions create nodes, so their
         * order is the ids'), and push the groups in symbol order. */
        int64_t cnt = S->stop - base;
        int64_t *tmp = malloc((size_t)cnt * 6 * sizeof(int64_t)); /* triples, then group_of and acc */
        if (!tmp) {
            S->stop = base;
            return E_NOMEM;
        }
        int64_t *group_of = tmp + 3 * cnt, *acc = tmp + 4 * cnt;
        for (int64_t k = 0; k < cnt; k++) {
            tmp[3 * k] = S->ssym[base + k];
            tmp[3 * k + 1] = S->skid[base + k];
            tmp[3 * k + 2] = k;
        }
        /* (scratch: where group_of and acc go after) */
        sort_edge_triples((EdgeTriple *)tmp, (EdgeTriple *)(tmp + 3 * cnt), cnt);
        int64_t groups = 0;
        for (int64_t k = 0; k < cnt; k++) {
            if (k == 0 || tmp[3 * k] != tmp[3 * (k - 1)]) acc[groups++] = W_EMPTY;
            group_of[tmp[3 * k + 2]] = groups - 1;
        }
        for (int64_t k = 0; k < cnt; k++) { /* edge order: the scratch still holds the edges */
            int64_t g = group_of[k];
            int64_t kid = w_union(S, acc[g], S->skid[base + k], depth + 1);
            if (kid < 0) {
                free(tmp);
                S->stop = base;
                return kid;
            }
            acc[g] = kid;
        }
        int64_t *syms = malloc((size_t)(groups ? groups : 1) * sizeof(int64_t));
        if (!syms) {
            free(tmp);
            S->stop = base;
            return E_NOMEM;
        }
        for (int64_t k = 0, g = 0; k < cnt; k++)
            if (k == 0 || tmp[3 * k] != tmp[3 * (k - 1)]) syms[g++] = tmp[3 * k];
        S->stop = base;
        for (int64_t g = 0; g < groups; g++)
            if (push_edge(S, syms[g], acc[g]) < 0) {
                free(syms);
                free(tmp);
                S->stop = base;
                return E_NOMEM;
            }
        free(syms);
        free(tmp); /* (acc lives in tmp) */
        r = make_scratch(S, accepts, base);
    }
    if (r < 0) return r;
    if (node < P->mlen) P->memo[node] = (int32_t)r;
    return r;
}

static int64_t gnf_opt(Words *S, GnfPass *P, int64_t node, int depth) {
    if (node < P->mlen && P->memo[node] >= 0) return P->memo[node];
    if (node <= W_EPSILON) return node;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t e0 = S->estart[node], e1 = S->estart[node + 1];
    int accepts = S->acc[node];
    int64_t base = S->stop;
    for (int64_t i = e0; i < e1; i++) {
        int64_t rc = gnf_opt(S, P, S->ekid[i], depth + 1);
        if (rc < 0) {
            S->stop = base;
            return rc;
        }
        if (push_edge(S, S->esym[i], rc) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    int64_t r = make_scratch(S, accepts, base);
    if (r < 0) return r;
    for (int64_t i = e0; i < e1; i++) {
        int64_t s = S->esym[i];
        if (s >= 0 && s < P->m && P->nullable[s]) {
            int64_t rc = gnf_opt(S, P, S->ekid[i], depth + 1);
            if (rc < 0) return rc;
            r = w_union(S, r, rc, depth + 1);
            if (r < 0) return r;
        }
    }
    if (node < P->mlen) P->memo[node] = (int32_t)r;
    return r;
}

/* Node ids of a Python iterable, checked. */
/* mode 0: node ids; 1: node ids or -1; 2: any integers (nonterminal ids) */
int64_t *gnf_node_list(Words *S, PyObject *seq, Py_ssize_t *count, int mode) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of nodes");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int64_t *out = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((v == -1 && PyErr_Occurred()) || (mode == 0 && check_node(S, v) < 0) ||
            (mode == 1 && v != -1 && check_node(S, v) < 0)) {
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = v;
    }
    Py_DECREF(fast);
    *count = n;
    return out;
}

static PyObject *gnf_run(Words *S, PyObject *roots, GnfPass *P, int optional) {
    Py_ssize_t n;
    int64_t *nodes = gnf_node_list(S, roots, &n, 0);
    if (!nodes) return NULL;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int64_t r = optional ? gnf_opt(S, P, nodes[i], 0) : gnf_map(S, P, nodes[i], 0);
        if (r < 0) {
            Py_CLEAR(out);
            raise_code(S, r);
            break;
        }
        PyObject *x = PyLong_FromLongLong(r);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
    free(nodes);
    return out;
}

static int gnf_memo(Py_buffer *memo, GnfPass *P) {
    if (memo->itemsize != 4 || memo->len % 4) {
        PyErr_SetString(PyExc_ValueError, "gnf pass: the memo must be an int32 buffer");
        return -1;
    }
    P->memo = memo->buf;
    P->mlen = memo->len / 4;
    return 0;
}

PyObject *words_map_symbols(Words *S, PyObject *args) {
    PyObject *roots;
    Py_buffer to, memo;
    if (!PyArg_ParseTuple(args, "Oy*w*", &roots, &to, &memo)) return NULL;
    PyObject *out = NULL;
    GnfPass P = {0};
    if (to.len % 8) {
        PyErr_SetString(PyExc_ValueError, "map_symbols: the map must be an int64 buffer");
    } else if (gnf_memo(&memo, &P) == 0) {
        P.to = to.buf;
        P.m = to.len / 8;
        out = gnf_run(S, roots, &P, 0);
    }
    PyBuffer_Release(&to);
    PyBuffer_Release(&memo);
    return out;
}

PyObject *words_optional(Words *S, PyObject *args) {
    PyObject *roots;
    Py_buffer nullable, memo;
    if (!PyArg_ParseTuple(args, "Oy*w*", &roots, &nullable, &memo)) return NULL;
    PyObject *out = NULL;
    GnfPass P = {0};
    if (gnf_memo(&memo, &P) == 0) {
        P.nullable = nullable.buf;
        P.m = nullable.len;
        out = gnf_run(S, roots, &P, 1);
    }
    PyBuffer_Release(&nullable);
    PyBuffer_Release(&memo);
    return out;
}

/* has-a-word search of gnf._closure: state 1 holds (kept across rounds), 2 + round fails this round */
/* GNF_CLOSURE_ORDER: the closures' rounds visit the nonterminals last first. The fixpoint is the same in any
 * order; a rule names mostly rules after it (the byte CFG's are listed from the start down, the lifted terminals
 * come last), so last first finds most of them in the first round where first first took a round per level. */
static int gnf_has_word(Words *S, int64_t node, uint32_t *state, uint32_t round, const uint8_t *found, int64_t m,
                        int generating, int depth) {
    if (state[node] == 1) return 1;
    if (state[node] == round) return 0;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int got = S->acc[node];
    for (int64_t i = S->estart[node]; !got && i < S->estart[node + 1]; i++) {
        int64_t s = S->esym[i];
        int counts = (s >= 0 && s < m && found[s]) || (generating && (s < 0 || s >= ((int64_t)1 << 48)));
        if (!counts) continue;
        int r = gnf_has_word(S, S->ekid[i], state, round, found, m, generating, depth + 1);
        if (r < 0) return r;
        got = r;
    }
    state[node] = got ? 1 : round;
    return got;
}

PyObject *words_closure(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj;
    long long m;
    int generating;
    if (!PyArg_ParseTuple(args, "OOLp", &nts_obj, &roots_obj, &m, &generating)) return NULL;
    Py_ssize_t n, n2;
    int64_t *nts = NULL, *roots = NULL;
    uint8_t *found = NULL;
    uint32_t *state = NULL;
    PyObject *out = NULL;
    nts = gnf_node_list(S, nts_obj, &n, 2); /* (nonterminal ids, checked below) */
    if (!nts) return NULL;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "closure: nonterminals and roots differ in number");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (nts[i] < 0 || nts[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "closure: a nonterminal past m");
            goto done;
        }
    found = calloc((size_t)m + 1, 1);
    state = calloc((size_t)S->n + 1, sizeof(uint32_t));
    if (!found || !state) {
        PyErr_NoMemory();
        goto done;
    }
    state[W_EPSILON] = 1;
    for (uint32_t round = 2;; round++) {
        int changed = 0;
        for (Py_ssize_t i = n; i-- > 0;) { /* (last first: see GNF_CLOSURE_ORDER) */
            if (found[nts[i]]) continue;
            int r = gnf_has_word(S, roots[i], state, round, found, m, generating, 0);
            if (r < 0) {
                raise_code(S, r);
                goto done;
            }
            if (r) {
                found[nts[i]] = 1;
                changed = 1;
            }
        }
        if (!changed) break;
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        if (!found[nts[i]]) continue;
        PyObject *x = PyLong_FromLongLong(nts[i]);
        if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
done:
    free(nts);
    free(roots);
    free(found);
    free(state);
    return out;
}

/* REACHABLE from `start` (words_reach, words_useless): nonterminal a's rule set is node rule[a] (< 0:
 * none); reached[a] set for every nonterminal in [0, m) a word of a reached rule set names, a family
 * member F_c of family f < nf naming its item fitem[f] (gnf._remove_useless). seen (a
 * bit per store node), frontier (m + 1 slots) and the growing stack are the caller's; -1: no memory. */
static int reach_from(Words *S, const int64_t *rule, int64_t m, int64_t start, const int64_t *fitem, int64_t nf,
                      uint8_t *reached, uint64_t *seen, int64_t *frontier, int64_t **stack, int64_t *cap) {
    int64_t ftop = 0, top = 0;
    reached[start] = 1;
    frontier[ftop++] = start;
    while (ftop) {
        int64_t a = frontier[--ftop];
        if (rule[a] < 0) continue;
        if (grow((void **)stack, cap, top + 1, sizeof(int64_t)) < 0) return -1;
        (*stack)[top++] = rule[a];
        while (top) {
            int64_t node = (*stack)[--top];
            if ((seen[node >> 6] >> (node & 63)) & 1) continue;
            seen[node >> 6] |= (uint64_t)1 << (node & 63);
            int64_t e0 = S->estart[node], cnt = n_edges(S, node);
            if (grow((void **)stack, cap, top + cnt, sizeof(int64_t)) < 0) return -1;
            for (int64_t i = e0; i < e0 + cnt; i++) {
                int64_t sym = S->esym[i];
                if (nf && sym >= FAMILY_BASE && sym < WIDE_IN && ((sym - FAMILY_BASE) >> 32) < nf)
                    sym = fitem[(sym - FAMILY_BASE) >> 32]; /* a member's rows are its item's: the item stays */
                if (sym >= 0 && sym < m && !reached[sym]) {
                    reached[sym] = 1;
                    frontier[ftop++] = sym;
                }
                (*stack)[top++] = S->ekid[i];
            }
        }
    }
    return 0;
}

PyObject *words_reach(Words *S, PyObject *args) {
    PyObject *roots_obj, *items_obj = NULL;
    long long start;
    if (!PyArg_ParseTuple(args, "OL|O", &roots_obj, &start, &items_obj)) return NULL;
    Py_ssize_t m, nf = 0;
    int64_t *roots = gnf_node_list(S, roots_obj, &m, 1), *fitem = NULL;
    if (!roots) return NULL;
    PyObject *out = NULL;
    if (items_obj && !(fitem = gnf_node_list(S, items_obj, &nf, 2))) {
        free(roots);
        return NULL;
    }
    uint8_t *reached = calloc((size_t)m + 1, 1);
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *frontier = malloc((size_t)(m + 1) * sizeof(int64_t));
    int64_t *stack = NULL, cap = 0;
    if (!reached || !seen || !frontier) {
        PyErr_NoMemory();
        goto done;
    }
    if (start < 0 || start >= m || roots[start] < 0) {
        PyErr_SetString(PyExc_ValueError, "reach: the start has no rule set");
        goto done;
    }
    if (reach_from(S, roots, m, start, fitem, nf, reached, seen, frontier, &stack, &cap) < 0) goto nomem;
    out = PyList_New(0);
    for (int64_t a = 0; out && a < m; a++) {
        if (!reached[a]) continue;
        PyObject *x = PyLong_FromLongLong(a);
        if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(roots);
    free(fitem);
    free(reached);
    free(seen);
    free(frontier);
    free(stack);
    return out;
}

/* useless(nts, roots, m, start[, items]) -> [nt] or None: gnf._remove_useless (items[f]: family f's item, as
 * reach_from reads them), where it needs no restricting: GENERATING (the closure; a family member counts),
 * then REACHABLE from the start through the generating rule sets; the nonterminals kept, in the order of nts.
 * None where the Python walk has more to do: some rule set names a nonterminal that is not generating
 * (restricting makes nodes), or the start is not generating. */
PyObject *words_useless(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj, *items_obj = NULL;
    long long m, start;
    if (!PyArg_ParseTuple(args, "OOLL|O", &nts_obj, &roots_obj, &m, &start, &items_obj)) return NULL;
    Py_ssize_t n, n2, nf = 0;
    int64_t *nts = NULL, *roots = NULL, *rule = NULL, *stack = NULL, *frontier = NULL, *fitem = NULL, cap = 0, top = 0;
    uint8_t *found = NULL, *reached = NULL;
    uint32_t *state = NULL;
    uint64_t *seen = NULL;
    PyObject *out = NULL;
    nts = gnf_node_list(S, nts_obj, &n, 2);
    if (!nts) return NULL;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (items_obj && !(fitem = gnf_node_list(S, items_obj, &nf, 2))) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "useless: nonterminals and roots differ in number");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (nts[i] < 0 || nts[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "useless: a nonterminal past m");
            goto done;
        }
    found = calloc((size_t)m + 1, 1);
    reached = calloc((size_t)m + 1, 1);
    rule = malloc((size_t)(m + 1) * sizeof(int64_t));
    frontier = malloc((size_t)(m + 1) * sizeof(int64_t));
    state = calloc((size_t)S->n + 1, sizeof(uint32_t));
    seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    if (!found || !reached || !rule || !frontier || !state || !seen) goto nomem;
    /* GENERATING, as words_closure */
    state[W_EPSILON] = 1;
    for (uint32_t round = 2;; round++) {
        int changed = 0;
        for (Py_ssize_t i = n; i-- > 0;) { /* (last first: see GNF_CLOSURE_ORDER) */
            if (found[nts[i]]) continue;
            int r = gnf_has_word(S, roots[i], state, round, found, m, 1, 0);
            if (r < 0) {
                raise_code(S, r);
                goto done;
            }
            if (r) {
                found[nts[i]] = 1;
                changed = 1;
            }
        }
        if (!changed) break;
    }
    Py_ssize_t generating = 0;
    for (Py_ssize_t i = 0; i < n; i++) generating += found[nts[i]];
    if (generating < n) { /* does any rule set name a nonterminal that is not generating? (gnf._symbols_named) */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
            stack[top++] = roots[i];
        }
        while (top) {
            int64_t node = stack[--top];
            if ((seen[node >> 6] >> (node & 63)) & 1) continue;
            seen[node >> 6] |= (uint64_t)1 << (node & 63);
            int64_t e0 = S->estart[node], cnt = n_edges(S, node);
            if (grow((void **)&stack, &cap, top + cnt, sizeof(int64_t)) < 0) goto nomem;
            for (int64_t i = e0; i < e0 + cnt; i++) {
                int64_t sym = S->esym[i];
                if (sym >= 0 && sym < ((int64_t)1 << 48) && !(sym < m && found[sym])) {
                    out = Py_None; /* restricting needed: the Python walk */
                    Py_INCREF(out);
                    goto done;
                }
                stack[top++] = S->ekid[i];
            }
        }
        memset(seen, 0, (size_t)(S->n / 64 + 1) * sizeof(uint64_t));
    }
    if (start < 0 || start >= m || !found[start]) {
        out = Py_None; /* the start is kept with an empty rule set: the Python walk */
        Py_INCREF(out);
        goto done;
    }
    /* REACHABLE, as words_reach, over the generating rule sets */
    for (int64_t a = 0; a <= m; a++) rule[a] = -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (found[nts[i]]) rule[nts[i]] = roots[i];
    if (rule[start] < 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    if (reach_from(S, rule, m, start, fitem, nf, reached, seen, frontier, &stack, &cap) < 0) goto nomem;
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int64_t a = nts[i];
        if (!found[a] || !reached[a]) continue;
        PyObject *x = PyLong_FromLongLong(a);
        if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
    goto done;
nomem:
    Py_CLEAR(out);
    PyErr_NoMemory();
done:
    free(nts);
    free(roots);
    free(fitem);
    free(found);
    free(reached);
    free(rule);
    free(frontier);
    free(state);
    free(seen);
    free(stack);
    return out;
}

PyObject *words_symbols(Words *S, PyObject *roots_obj) {
    Py_ssize_t n;
    int64_t *roots = gnf_node_list(S, roots_obj, &n, 0);
    if (!roots) return NULL;
    PyObject *out = NULL;
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *stack = NULL, cap = 0, top = 0;
    if (!seen || grow((void **)&stack, &cap, n + 1, sizeof(int64_t)) < 0) goto nomem;
    for (Py_ssize_t i = 0; i < n; i++) stack[top++] = roots[i];
    out = PySet_New(NULL);
    while (out && top) {
        int64_t node = stack[--top];
        if ((seen[node >> 6] >> (node & 63)) & 1) continue;
        seen[node >> 6] |= (uint64_t)1 << (node & 63);
        int64_t e0 = S->estart[node], cnt = n_edges(S, node);
        if (grow((void **)&stack, &cap, top + cnt, sizeof(int64_t)) < 0) goto nomem;
        for (int64_t i = e0; i < e0 + cnt; i++) {
            PyObject *x = PyLong_FromLongLong(S->esym[i]);
            if (!x || PySet_Add(out, x) < 0) Py_CLEAR(out);
            Py_XDECREF(x);
            stack[top++] = S->ekid[i];
        }
    }
    goto done;
nomem:
    Py_CLEAR(out);
    PyErr_NoMemory();
done:
    free(roots);
    free(seen);
    free(stack);
    return out;
}

/* word(symbols) -> node: WordStore.word, the singleton set {symbols} (made from its last symbol on). */
PyObject *words_word(Words *S, PyObject *symbols) {
    PyObject *fast = PySequence_Fast(symbols, "word: expected a sequence of symbols");
    if (!fast) return NULL;
    int64_t node = W_EPSILON;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(fast) - 1; i >= 0; i--) {
        long long sym = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (sym == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        node = make1(S, sym, node);
        if (node < 0) {
            Py_DECREF(fast);
            return raise_code(S, node);
        }
    }
    Py_DECREF(fast);
    return PyLong_FromLongLong(node);
}

/* The progress buffer of a pass that names the rule it works on (gnf's rules.current, which a budget error
 * names): an int64 buffer of one entry, -1 or the nonterminal. */
static int gnf_progress(Py_buffer *buf, int64_t **at) {
    if (buf->itemsize != 8 || buf->len < 8) {
        PyErr_SetString(PyExc_ValueError, "gnf pass: the progress must be an int64 buffer of one entry");
        return -1;
    }
    *at = buf->buf;
    **at = -1;
    return 0;
}

/* substitute_leading(seq, roots, at) -> [node]: gnf._substitute_all_leading. For each a of
 * seq in turn (roots[a]: a's rule set, updated as it goes; -1: none): the atom-led edges kept as one node,
 * then concat(R_B, tail) for each leading nonterminal B in edge order, united left to right from ∅
 * (WordStore.union_all). at[0]: the nonterminal being worked on (the last one, once done). Returns the new rule sets in seq's order. */
PyObject *words_substitute_leading(Words *S, PyObject *args) {
    PyObject *seq_obj, *roots_obj;
    Py_buffer atbuf;
    if (!PyArg_ParseTuple(args, "OOw*", &seq_obj, &roots_obj, &atbuf)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = 0, m = 0;
    int64_t *seq = NULL, *roots = NULL, *at, *res = NULL, *tmp = NULL, tcap = 0;
    if (gnf_progress(&atbuf, &at) < 0) goto done;
    seq = gnf_node_list(S, seq_obj, &n, 2);
    if (!seq) goto done;
    roots = gnf_node_list(S, roots_obj, &m, 1);
    if (!roots) goto done;
    res = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!res) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t a = seq[k];
        if (a < 0 || a >= m || roots[a] < 0) {
            PyErr_SetString(PyExc_KeyError, "substitute_leading: a nonterminal without a rule set");
            goto done;
        }
        *at = a;
        int64_t node = roots[a], e0 = S->estart[node], e1 = S->estart[node + 1], first = e0;
        while (first < e1 && S->esym[first] < 0) first++; /* edges are sorted: atoms (< 0) first */
        if (first < e1) {
            int64_t base = S->stop;
            for (int64_t i = e0; i < first; i++)
                if (push_edge(S, S->esym[i], S->ekid[i]) < 0) {
                    S->stop = base;
                    PyErr_NoMemory();
                    goto done;
                }
            int64_t kept = make_scratch(S, S->acc[node], base);
            if (kept < 0) {
                raise_code(S, kept);
                goto done;
            }
            int64_t cnt = e1 - first;
            if (grow((void **)&tmp, &tcap, cnt, sizeof(int64_t)) < 0) {
                PyErr_NoMemory();
                goto done;
            }
            for (int64_t i = first; i < e1; i++) { /* (e0 and e1 stay valid: nodes are never moved) */
                int64_t b = S->esym[i];
                if (b >= m || roots[b] < 0) {
                    PyErr_SetString(PyExc_KeyError, "substitute_leading: a leading nonterminal without a rule set");
                    goto done;
                }
                int64_t r = w_concat(S, roots[b], S->ekid[i], 0);
                if (r < 0) {
                    raise_code(S, r);
                    goto done;
                }
                tmp[i - first] = r;
            }
            int64_t u = w_union(S, W_EMPTY, kept, 0);
            for (int64_t i = 0; u >= 0 && i < cnt; i++) u = w_union(S, u, tmp[i], 0);
            if (u < 0) {
                raise_code(S, u);
                goto done;
            }
            node = roots[a] = u;
        }
        if (S->estart[node + 1] > S->estart[node] && S->esym[S->estart[node + 1] - 1] >= 0) {
            PyErr_SetString(PyExc_AssertionError, "leading substitution left a nonterminal");
            goto done;
        }
        res[k] = node;
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out && k < n; k++) {
        PyObject *x = PyLong_FromLongLong(res[k]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, x);
    }
done:
    PyBuffer_Release(&atbuf);
    free(seq);
    free(roots);
    free(res);
    free(tmp);
    return out;
}

/* remove_units(nts, roots, m, at) -> [node]: gnf._remove_units (nts in the rule map's
 * order, roots[i] nts[i]'s rule set). First each rule set's proper part in that order: unchanged without a
 * nonterminal edge into a set holding ε, else the node without the edges into {ε} and with ε taken out of
 * the other nonterminal edges' children (in edge order); then, in that order, each rule set with units
 * the union, left to right from ∅, of the proper parts of its unit closure in nonterminal order. at[0]: the
 * nonterminal being worked on in the second loop (-1 in the first; the last one, once done). */
PyObject *words_remove_units(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj;
    long long mm;
    Py_buffer atbuf;
    if (!PyArg_ParseTuple(args, "OOLw*", &nts_obj, &roots_obj, &mm, &atbuf)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = 0, n2 = 0;
    int64_t m = mm, *at, *nts = NULL, *roots = NULL, *where = NULL, *proper = NULL, *stack = NULL, *clo = NULL;
    int64_t *res = NULL;
    uint8_t *has_units = NULL;
    uint32_t *mark = NULL;
    if (gnf_progress(&atbuf, &at) < 0) goto done;
    nts = gnf_node_list(S, nts_obj, &n, 2);
    if (!nts) goto done;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "remove_units: nonterminals and roots differ in number");
        goto done;
    }
    where = malloc((size_t)(m + 1) * sizeof(int64_t));
    proper = malloc((size_t)(n + 1) * sizeof(int64_t));
    stack = malloc((size_t)(n + 1) * sizeof(int64_t));
    clo = malloc((size_t)(n + 1) * sizeof(int64_t));
    has_units = calloc((size_t)n + 1, 1);
    mark = calloc((size_t)n + 1, sizeof(uint32_t));
    res = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!where || !proper || !stack || !clo || !has_units || !mark || !res) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t a = 0; a <= m; a++) where[a] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (nts[i] < 0 || nts[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "remove_units: a nonterminal past m");
            goto done;
        }
        where[nts[i]] = i;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = roots[i], e0 = S->estart[r], e1 = S->estart[r + 1];
        for (int64_t e = e0; e < e1; e++)
            if (S->esym[e] >= 0 && S->acc[S->ekid[e]]) has_units[i] = 1;
        if (!has_units[i]) {
            proper[i] = r;
            continue;
        }
        int64_t base = S->stop;
        for (int64_t e = e0; e < e1; e++) {
            int64_t sym = S->esym[e], c = S->ekid[e];
            if (sym >= 0 && c == W_EPSILON) continue;
            if (sym >= 0 && S->acc[c]) { /* without_empty_word: the same edges, not accepting */
                int64_t base2 = S->stop;
                for (int64_t j = S->estart[c]; j < S->estart[c + 1]; j++)
                    if (push_edge(S, S->esym[j], S->ekid[j]) < 0) {
                        S->stop = base;
                        PyErr_NoMemory();
                        goto done;
                    }
                c = make_scratch(S, 0, base2);
                if (c < 0) {
                    S->stop = base;
                    raise_code(S, c);
                    goto done;
                }
            }
            if (push_edge(S, sym, c) < 0) {
                S->stop = base;
                PyErr_NoMemory();
                goto done;
            }
        }
        proper[i] = make_scratch(S, S->acc[r], base);
        if (proper[i] < 0) {
            raise_code(S, proper[i]);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        res[i] = proper[i];
        if (!has_units[i]) continue;
        *at = nts[i];
        uint32_t stamp = (uint32_t)i + 1;
        int64_t top = 0, nc = 0;
        mark[i] = stamp;
        clo[nc++] = nts[i];
        stack[top++] = i;
        while (top) {
            int64_t v = stack[--top], r = roots[v];
            for (int64_t e = S->estart[r]; e < S->estart[r + 1]; e++) {
                int64_t b = S->esym[e];
                if (b < 0 || !S->acc[S->ekid[e]]) continue;
                int64_t w = b < m ? where[b] : -1;
                if (w < 0) {
                    PyErr_SetString(PyExc_KeyError, "remove_units: a unit without a rule set");
                    goto done;
                }
                if (mark[w] != stamp) {
                    mark[w] = stamp;
                    clo[nc++] = b;
                    stack[top++] = w;
                }
            }
        }
        qsort(clo, (size_t)nc, sizeof(int64_t), cmp_i64);
        int64_t u = W_EMPTY;
        for (int64_t k = 0; u >= 0 && k < nc; k++) u = w_union(S, u, proper[where[clo[k]]], 0);
        if (u < 0) {
            raise_code(S, u);
            goto done;
        }
        res[i] = u; /* (proper[] stays the first loop's: later closures read it) */
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(res[i]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
done:
    PyBuffer_Release(&atbuf);
    free(res);
    free(nts);
    free(roots);
    free(where);
    free(proper);
    free(stack);
    free(clo);
    free(has_units);
    free(mark);
    return out;
}

/* reachable_count(roots) -> int: len(WordStore.reachable(roots)) (nodes other than EMPTY and EPSILON below
 * the roots, the roots included), without the set: the normal form's size after each step. */
PyObject *words_reachable_count(Words *S, PyObject *roots_obj) {
    Py_ssize_t n;
    int64_t *roots = gnf_node_list(S, roots_obj, &n, 0);
    if (!roots) return NULL;
    PyObject *out = NULL;
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *stack = NULL, cap = 0, top = 0, count = 0;
    if (!seen || grow((void **)&stack, &cap, n + 1, sizeof(int64_t)) < 0) goto nomem;
    for (Py_ssize_t i = 0; i < n; i++)
        if (roots[i] > W_EPSILON) stack[top++] = roots[i];
    while (top) {
        int64_t node = stack[--top];
        if ((seen[node >> 6] >> (node & 63)) & 1) continue;
        seen[node >> 6] |= (uint64_t)1 << (node & 63);
        count++;
        int64_t e0 = S->estart[node], m = n_edges(S, node);
        if (grow((void **)&stack, &cap, top + m, sizeof(int64_t)) < 0) goto nomem;
        for (int64_t i = e0; i < e0 + m; i++) {
            int64_t c = S->ekid[i];
            if (c > W_EPSILON && !((seen[c >> 6] >> (c & 63)) & 1)) stack[top++] = c;
        }
    }
    out = PyLong_FromLongLong(count);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(roots);
    free(seen);
    free(stack);
    return out;
}

/* count_sum(roots) -> int or None: the sum of count(r) over the roots (Words.count, memoised per node), None
 * when some root's count is past 64 bits (the caller counts those with Python's ints). */
PyObject *words_count_sum(Words *S, PyObject *roots_obj) {
    PyObject *fast = PySequence_Fast(roots_obj, "count_sum: expected a sequence of nodes");
    if (!fast) return NULL;
    /* In 64 bits while the sum fits (each root's count read from Words.count's memo, filled by it), then
     * with Python's ints from the first root that does not fit. */
    uint64_t small = 0;
    Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(fast);
    for (; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        long long node = PyLong_AsLongLong(item);
        if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) {
            Py_DECREF(fast);
            return NULL;
        }
        if (node >= S->ccount_cap || !S->cstate[node]) {
            PyObject *got = words_count(S, item); /* fills the memo */
            if (!got) {
                Py_DECREF(fast);
                return NULL;
            }
            Py_DECREF(got);
        }
        if (S->cstate[node] == 2) {
            Py_DECREF(fast);
            Py_RETURN_NONE;
        }
        if (__builtin_add_overflow(small, S->cval[node], &small)) break; /* (item i again, below) */
    }
    if (i == n) {
        Py_DECREF(fast);
        return PyLong_FromUnsignedLongLong(small);
    }
    small -= S->cval[PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i))]; /* (wrapped: undone) */
    PyObject *total = PyLong_FromUnsignedLongLong(small);
    for (; total && i < n; i++) {
        PyObject *got = words_count(S, PySequence_Fast_GET_ITEM(fast, i));
        if (!got) {
            Py_CLEAR(total);
            break;
        }
        if (got == Py_None) {
            Py_DECREF(total);
            total = got;
            break;
        }
        PyObject *sum = PyNumber_Add(total, got);
        Py_DECREF(got);
        Py_DECREF(total);
        total = sum;
    }
    Py_DECREF(fast);
    return total;
}

/* left_work(order, roots, m) -> bytes: for gnf._remove_left_recursion, flag i set where order[i]'s rule set
 * (roots[i]) has a nonterminal edge on itself or on one earlier in the order (nonterminals < m); the others
 * it leaves as they are (no node made), and their rule sets are not changed before their turn. */
PyObject *words_left_work(Words *S, PyObject *args) {
    PyObject *order_obj, *roots_obj;
    long long m;
    if (!PyArg_ParseTuple(args, "OOL", &order_obj, &roots_obj, &m)) return NULL;
    Py_ssize_t n, n2;
    int64_t *order = gnf_node_list(S, order_obj, &n, 2), *roots = NULL, *pos = NULL;
    if (!order) return NULL;
    PyObject *out = NULL;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "left_work: order and roots differ in number");
        goto done;
    }
    pos = malloc((size_t)(m + 1) * sizeof(int64_t));
    if (!pos) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t a = 0; a <= m; a++) pos[a] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "left_work: a nonterminal past m");
            goto done;
        }
        pos[order[i]] = i;
    }
    out = PyBytes_FromStringAndSize(NULL, n);
    if (!out) goto done;
    char *flag = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = roots[i], a = order[i];
        flag[i] = 0;
        for (int64_t e = S->estart[r]; e < S->estart[r + 1] && !flag[i]; e++) {
            int64_t sym = S->esym[e];
            if (sym == a || (sym >= 0 && sym < m && pos[sym] >= 0 && pos[sym] < i)) flag[i] = 1;
        }
    }
done:
    free(order);
    free(roots);
    free(pos);
    return out;
}

/* atom_rows(roots, to, memo) -> [dict]: the normal form's table from its rule sets (gnf._to_gnf's dense
 * renumbering): per root, {atom index (-1 - symbol): the edge's child mapped through `to` (gnf_map)}, the
 * children mapped in edge order, roots in order (as map_symbols over the rows' children in order). */
PyObject *words_atom_rows(Words *S, PyObject *args) {
    PyObject *roots_obj;
    Py_buffer to, memo;
    if (!PyArg_ParseTuple(args, "Oy*w*", &roots_obj, &to, &memo)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = 0;
    int64_t *roots = NULL;
    GnfPass P = {0};
    if (to.len % 8) {
        PyErr_SetString(PyExc_ValueError, "atom_rows: the map must be an int64 buffer");
        goto done;
    }
    if (gnf_memo(&memo, &P) < 0) goto done;
    P.to = to.buf;
    P.m = to.len / 8;
    roots = gnf_node_list(S, roots_obj, &n, 0);
    if (!roots) goto done;
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out && k < n; k++) {
        PyObject *row = PyDict_New();
        if (!row) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, row);
        for (int64_t i = S->estart[roots[k]]; i < S->estart[roots[k] + 1]; i++) {
            int64_t sym = S->esym[i];
            int64_t r = gnf_map(S, &P, S->ekid[i], 0);
            if (r < 0) {
                Py_CLEAR(out);
                raise_code(S, r);
                break;
            }
            PyObject *key = PyLong_FromLongLong(-1 - sym), *val = PyLong_FromLongLong(r);
            int bad = !key || !val || PyDict_SetItem(row, key, val) < 0;
            Py_XDECREF(key);
            Py_XDECREF(val);
            if (bad) {
                Py_CLEAR(out);
                break;
            }
        }
    }
done:
    PyBuffer_Release(&to);
    PyBuffer_Release(&memo);
    free(roots);
    return out;
}

/* union_all(nodes) -> node: WordStore.union_all, the nodes united left to right from EMPTY. */
PyObject *words_union_all(Words *S, PyObject *nodes_obj) {
    Py_ssize_t n;
    int64_t *nodes = gnf_node_list(S, nodes_obj, &n, 0);
    if (!nodes) return NULL;
    int64_t u = W_EMPTY;
    for (Py_ssize_t i = 0; u >= 0 && i < n; i++) u = w_union(S, u, nodes[i], 0);
    free(nodes);
    return u < 0 ? raise_code(S, u) : PyLong_FromLongLong(u);
}

/* epsilon_free(nts, roots, nullable, memo, at) -> [node]: gnf._remove_epsilon's loop: for each rule set in
 * order, optional(root) (gnf_opt) without the empty word (WordStore.without_empty_word: the same edges, not
 * accepting), made in that order. at[0]: the nonterminal being worked on (the last one, once done). */
PyObject *words_epsilon_free(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj;
    Py_buffer nullable, memo, atbuf;
    if (!PyArg_ParseTuple(args, "OOy*w*w*", &nts_obj, &roots_obj, &nullable, &memo, &atbuf)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = 0, n2 = 0;
    int64_t *nts = NULL, *roots = NULL, *at;
    GnfPass P = {0};
    if (gnf_progress(&atbuf, &at) < 0 || gnf_memo(&memo, &P) < 0) goto done;
    P.nullable = nullable.buf;
    P.m = nullable.len;
    nts = gnf_node_list(S, nts_obj, &n, 2);
    if (!nts) goto done;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2) {
        PyErr_SetString(PyExc_ValueError, "epsilon_free: nonterminals and roots differ in number");
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        *at = nts[i];
        int64_t r = gnf_opt(S, &P, roots[i], 0);
        if (r >= 0 && S->acc[r]) {
            int64_t base = S->stop;
            for (int64_t e = S->estart[r]; e < S->estart[r + 1]; e++)
                if (push_edge(S, S->esym[e], S->ekid[e]) < 0) {
                    S->stop = base;
                    r = E_NOMEM;
                    break;
                }
            if (r >= 0) r = make_scratch(S, 0, base);
        }
        if (r < 0) {
            Py_CLEAR(out);
            raise_code(S, r);
            break;
        }
        PyObject *x = PyLong_FromLongLong(r);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
done:
    PyBuffer_Release(&nullable);
    PyBuffer_Release(&memo);
    PyBuffer_Release(&atbuf);
    free(nts);
    free(roots);
    return out;
}

/* left_corner_order(nts, roots, m) -> [nt]: gnf._left_corner_order (Tarjan's SCCs of the graph a -> the
 * nonterminals leading a's rule set, roots tried in the order given (sorted), successors in edge order;
 * components sorted, sources first). nts[i] < m; roots[i] is nts[i]'s rule set. */
PyObject *words_left_corner_order(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj;
    long long m;
    if (!PyArg_ParseTuple(args, "OOL", &nts_obj, &roots_obj, &m)) return NULL;
    Py_ssize_t n, n2;
    int64_t *nts = gnf_node_list(S, nts_obj, &n, 2), *roots = NULL;
    if (!nts) return NULL;
    PyObject *out = NULL;
    int64_t *where = NULL, *index = NULL, *low = NULL, *tstack = NULL, *work = NULL, *comps = NULL, *cstart = NULL;
    uint8_t *on = NULL;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "left_corner_order: nonterminals and roots differ in number");
        goto done;
    }
    where = malloc((size_t)(m + 1) * sizeof(int64_t)); /* nonterminal -> its position in nts */
    index = malloc((size_t)(n + 1) * sizeof(int64_t));
    low = malloc((size_t)(n + 1) * sizeof(int64_t));
    tstack = malloc((size_t)(n + 1) * sizeof(int64_t));
    work = malloc((size_t)(2 * n + 2) * sizeof(int64_t)); /* (v, next edge) frames */
    comps = malloc((size_t)(n + 1) * sizeof(int64_t));
    cstart = malloc((size_t)(n + 2) * sizeof(int64_t));
    on = calloc((size_t)n + 1, 1);
    if (!where || !index || !low || !tstack || !work || !comps || !cstart || !on) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t a = 0; a <= m; a++) where[a] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (nts[i] < 0 || nts[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "left_corner_order: a nonterminal past m");
            goto done;
        }
        where[nts[i]] = i;
        index[i] = -1;
    }
    int64_t counter = 0, ttop = 0, ncomp = 0, nout = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (index[r] >= 0) continue;
        int64_t wtop = 0;
        work[wtop++] = r;
        work[wtop++] = S->estart[roots[r]];
        index[r] = low[r] = counter++;
        tstack[ttop++] = r;
        on[r] = 1;
        while (wtop) {
            int64_t v = work[wtop - 2], i = work[wtop - 1], end = S->estart[roots[v] + 1];
            int recurse = 0;
            while (i < end) {
                int64_t sym = S->esym[i++];
                if (sym < 0) continue;
                int64_t w = sym < m ? where[sym] : -1;
                if (w < 0) {
                    PyErr_SetString(PyExc_KeyError, "left_corner_order: a leading nonterminal without a rule set");
                    goto done;
                }
                if (index[w] < 0) {
                    work[wtop - 1] = i;
                    work[wtop++] = w;
                    work[wtop++] = S->estart[roots[w]];
                    index[w] = low[w] = counter++;
                    tstack[ttop++] = w;
                    on[w] = 1;
                    recurse = 1;
                    break;
                }
                if (on[w] && index[w] < low[v]) low[v] = index[w];
            }
            if (recurse) continue;
            work[wtop - 1] = i;
            if (low[v] == index[v]) { /* a component: popped, kept sorted by nonterminal id */
                cstart[ncomp] = nout;
                int64_t w;
                do {
                    w = tstack[--ttop];
                    on[w] = 0;
                    int64_t k = nout++;
                    while (k > cstart[ncomp] && nts[comps[k - 1]] > nts[w]) {
                        comps[k] = comps[k - 1];
                        k--;
                    }
                    comps[k] = w;
                } while (w != v);
                ncomp++;
            }
            wtop -= 2;
            if (wtop) {
                int64_t parent = work[wtop - 2];
                if (low[v] < low[parent]) low[parent] = low[v];
            }
        }
    }
    cstart[ncomp] = nout;
    out = PyList_New(0);
    for (int64_t c = ncomp - 1; out && c >= 0; c--) /* Tarjan emits sinks first: sources first here */
        for (int64_t k = cstart[c]; out && k < cstart[c + 1]; k++) {
            PyObject *x = PyLong_FromLongLong(nts[comps[k]]);
            if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
            Py_XDECREF(x);
        }
done:
    free(nts);
    free(roots);
    free(where);
    free(index);
    free(low);
    free(tstack);
    free(work);
    free(comps);
    free(cstart);
    free(on);
    return out;
}

static int byte_words(PyObject *bits, uint64_t *w);

/* The partition's shape of a byte set of bytes only (bits, 0 < bits < 2**256) as shape_of makes it: the edges
 * (atom symbol -1 - k, EPSILON) of the atoms it holds (an atom is in it iff its smallest byte is: byte b with
 * bit b of the partition's representatives, ctx[8], its atom atom_of[b], ctx[9]), by symbol, and its name
 * (format_byteset(s), ctx[10]). A new reference to (edges, name); Py_None where it is no such set (shape_of's:
 * the dead atom's empty set, token atoms); NULL with the exception set. */
static PyObject *lift_new_shape(PyObject *s, PyObject *bits, PyObject **ctx) {
    uint64_t w[4], rep[4];
    int rc = byte_words(bits, w);
    if (rc == 0) rc = byte_words(ctx[8], rep);
    if (rc != 0 || !(w[0] | w[1] | w[2] | w[3])) return rc < 0 ? NULL : Py_NewRef(Py_None);
    const unsigned char *atom_of = (const unsigned char *)PyBytes_AS_STRING(ctx[9]);
    int members[256], n = 0;
    for (int j = 0; j < 4; j++)
        for (uint64_t m = w[j] & rep[j]; m; m &= m - 1) members[n++] = atom_of[64 * j + __builtin_ctzll(m)];
    PyObject *edges = PyTuple_New(n), *name = NULL, *out = NULL;
    for (int i = 0; edges && i < n; i++) { /* (members ascend: their symbols, last first, ascend) */
        PyObject *e = Py_BuildValue("(Li)", (long long)(-1 - members[n - 1 - i]), W_EPSILON);
        if (!e) Py_CLEAR(edges);
        else PyTuple_SET_ITEM(edges, i, e);
    }
    if (edges && (name = PyObject_CallOneArg(ctx[10], s))) out = PyTuple_Pack(2, edges, name);
    Py_XDECREF(edges);
    Py_XDECREF(name);
    return out;
}

/* The lifted rule set of byte set s (bits: s.bits), shapes[bits] = (node, name): shape_of(s) where it is missing,
 * or, where the partition keeps s's (edges, name) (kept, ctx[7], gnf._Partition.shapes), made here as shape_of
 * makes it (the store's make(False, edges)) without the call. Borrowed from shapes; NULL with the exception set. */
static PyObject *lift_shape(Words *S, PyObject *s, PyObject *bits, PyObject **ctx) {
    PyObject *shapes = ctx[0], *shape = PyDict_GetItemWithError(shapes, bits); /* borrowed */
    if (shape || PyErr_Occurred()) return shape;
    PyObject *kept = ctx[7] ? Py_XNewRef(PyDict_GetItemWithError(ctx[7], bits)) : NULL;
    if (!kept && !PyErr_Occurred() && ctx[7] && ctx[8]) { /* made here as shape_of makes it, then kept */
        kept = lift_new_shape(s, bits, ctx);
        if (kept == Py_None) Py_CLEAR(kept); /* (shape_of's) */
        else if (kept && PyDict_SetItem(ctx[7], bits, kept) < 0) Py_CLEAR(kept);
    }
    if (kept && PyTuple_Check(kept) && PyTuple_GET_SIZE(kept) == 2) {
        PyObject *args = PyTuple_Pack(2, Py_False, PyTuple_GET_ITEM(kept, 0));
        PyObject *node = args ? words_make(S, args) : NULL;
        shape = node ? PyTuple_Pack(2, node, PyTuple_GET_ITEM(kept, 1)) : NULL;
        Py_XDECREF(args);
        Py_XDECREF(node);
    } else if (!PyErr_Occurred()) {
        shape = PyObject_CallOneArg(ctx[1], s);
    }
    Py_XDECREF(kept);
    if (shape && PyDict_SetItem(shapes, bits, shape) < 0) Py_CLEAR(shape);
    Py_XDECREF(shape); /* held by shapes */
    return shape;
}

/* One terminal occurrence of gnf._lift_terminals (one nonterminal per occurrence): byte set s at span in rule
 * `name` (source rule `rule`) becomes nonterminal len(names), named shapes[s.bits][1], with rule set
 * shapes[s.bits][0] (lift_shape) and origins ((name, rule, span),), one tuple per span of the rule (singles).
 * The new nonterminal in *nt; -1 with the exception set. */
static int lift_occurrence(Words *S, PyObject *s, PyObject *span, PyObject **ctx, PyObject *singles, int64_t *nt) {
    PyObject *names = ctx[2], *origins = ctx[3], *rule_sets = ctx[4];
    static PyObject *bits_name = NULL;
    if (!bits_name && !(bits_name = PyUnicode_InternFromString("bits"))) return -1;
    PyObject *single = PyDict_GetItemWithError(singles, span); /* borrowed */
    if (!single) {
        if (PyErr_Occurred()) return -1;
        PyObject *key = PyTuple_Pack(3, ctx[5], ctx[6], span);
        single = key ? PyTuple_Pack(1, key) : NULL;
        Py_XDECREF(key);
        if (!single || PyDict_SetItem(singles, span, single) < 0) {
            Py_XDECREF(single);
            return -1;
        }
        Py_DECREF(single); /* held by singles */
    }
    PyObject *bits = PyObject_GetAttr(s, bits_name);
    if (!bits) return -1;
    PyObject *shape = lift_shape(S, s, bits, ctx);
    Py_DECREF(bits);
    if (!shape) return -1;
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != 2) {
        PyErr_SetString(PyExc_TypeError, "lift_rule: a shape is a (node, name) tuple");
        return -1;
    }
    *nt = PyList_GET_SIZE(names);
    PyObject *key = PyLong_FromLongLong(*nt);
    int bad = !key || PyList_Append(names, PyTuple_GET_ITEM(shape, 1)) < 0 || PyList_Append(origins, single) < 0 ||
              PyDict_SetItem(rule_sets, key, PyTuple_GET_ITEM(shape, 0)) < 0;
    Py_XDECREF(key);
    return bad ? -1 : 0;
}

/* One production's word: names through ids, byte sets lifted (lift_occurrence), then WordStore.word of them.
 * at: the production's spans (a sequence as long as rhs) or NULL (None each). The node, or an E_ code / -1. */
static int64_t lift_word(Words *S, PyObject *rhs, PyObject *at, PyObject *ids, PyObject **ctx, PyObject *singles) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rhs);
    int64_t *syms = malloc((n ? n : 1) * sizeof(int64_t));
    if (!syms) return E_NOMEM;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *s = PySequence_Fast_GET_ITEM(rhs, k);
        if (PyUnicode_CheckExact(s)) {
            PyObject *id = PyDict_GetItemWithError(ids, s);
            if (!id && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, s);
            syms[k] = id ? PyLong_AsLongLong(id) : -1;
            if (syms[k] == -1 && PyErr_Occurred()) goto fail;
        } else if (lift_occurrence(S, s, at ? PySequence_Fast_GET_ITEM(at, k) : Py_None, ctx, singles, &syms[k]) < 0) {
            goto fail;
        }
    }
    int64_t node = W_EPSILON;
    for (Py_ssize_t k = n - 1; node >= 0 && k >= 0; k--) node = make1(S, syms[k], node);
    free(syms);
    return node;
fail:
    free(syms);
    return -1;
}

/* One rule's productions with one nonterminal per terminal occurrence: each production's word in turn
 * (lift_word; spans[i] read where it is as long as the production), the words then united left to right
 * from EMPTY (WordStore.union_all): the nodes, names, origins and rule sets in gnf._lift_terminals's order.
 * The node, or < 0 (an E_ code, or -1 with the exception set). */
static int64_t lift_alts(Words *S, PyObject *alts, PyObject *spans, PyObject *ids, PyObject **ctx) {
    PyObject *alts_f = PySequence_Fast(alts, "lift_rule: alternatives"), *spans_f = NULL, *singles = PyDict_New();
    spans_f = alts_f ? PySequence_Fast(spans, "lift_rule: spans") : NULL;
    int64_t *words = NULL, u = W_EMPTY;
    Py_ssize_t n = alts_f ? PySequence_Fast_GET_SIZE(alts_f) : 0, made = 0;
    if (!spans_f || !singles || !(words = malloc((n ? n : 1) * sizeof(int64_t)))) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        u = -1;
        goto done;
    }
    for (; made < n; made++) {
        PyObject *rhs = PySequence_Fast(PySequence_Fast_GET_ITEM(alts_f, made), "lift_rule: a production");
        PyObject *at = NULL;
        if (rhs && made < PySequence_Fast_GET_SIZE(spans_f)) {
            at = PySequence_Fast(PySequence_Fast_GET_ITEM(spans_f, made), "lift_rule: a production's spans");
            if (at && PySequence_Fast_GET_SIZE(at) != PySequence_Fast_GET_SIZE(rhs)) Py_CLEAR(at);
        }
        int64_t w = rhs && !PyErr_Occurred() ? lift_word(S, rhs, at, ids, ctx, singles) : -1;
        Py_XDECREF(rhs);
        Py_XDECREF(at);
        if (w < 0) {
            u = w;
            break;
        }
        words[made] = w;
    }
    for (Py_ssize_t i = 0; u >= 0 && i < made; i++) u = w_union(S, u, words[i], 0);
done:
    free(words);
    Py_XDECREF(alts_f);
    Py_XDECREF(spans_f);
    Py_XDECREF(singles);
    return PyErr_Occurred() ? -1 : u;
}

/* lift_rule(alts, spans, ids, shapes, shape_of, names, origins, rule_sets, name, rule) -> node: gnf._lift_terminals's
 * loop over one rule's productions with one nonterminal per terminal occurrence (its Python loop is the reference). */
PyObject *words_lift_rule(Words *S, PyObject *args) {
    PyObject *alts, *spans, *ids, *ctx[11] = {NULL};
    if (!PyArg_ParseTuple(args, "OOO!O!OO!O!O!OO", &alts, &spans, &PyDict_Type, &ids, &PyDict_Type, &ctx[0], &ctx[1],
                          &PyList_Type, &ctx[2], &PyList_Type, &ctx[3], &PyDict_Type, &ctx[4], &ctx[5], &ctx[6]))
        return NULL;
    int64_t u = lift_alts(S, alts, spans, ids, ctx);
    if (u == -1 && PyErr_Occurred()) return NULL;
    return u < 0 ? raise_code(S, u) : PyLong_FromLongLong(u);
}

/* Rule `name` of lift_all: skipped where counted or not live; else its rule set (lift_alts, its spans and source
 * rule read as gnf._lift_terminals reads them) stored as rule_sets[ids[name]]. 0, or -1 with the exception set. */
static int lift_one_rule(Words *S, PyObject *name, PyObject *alts, PyObject **cfg, PyObject *ids, PyObject **ctx) {
    int skip = PyDict_Contains(cfg[0], name);
    if (skip == 0) {
        int live = PySet_Contains(cfg[1], name);
        skip = live < 0 ? -1 : !live;
    }
    if (skip) return skip < 0 ? -1 : 0;
    PyObject *spans = PyDict_GetItemWithError(cfg[2], name), *origin = NULL, *id; /* borrowed */
    if (!spans && PyErr_Occurred()) return -1;
    if (!(origin = PyDict_GetItemWithError(cfg[3], name)) && PyErr_Occurred()) return -1;
    PyObject *rule = origin ? PyObject_GetAttrString(origin, "rule") : Py_NewRef(name);
    if (!rule) return -1;
    ctx[5] = name;
    ctx[6] = rule;
    int64_t u = lift_alts(S, alts, spans ? spans : cfg[4], ids, ctx);
    Py_DECREF(rule);
    if (u < 0) {
        if (!PyErr_Occurred()) raise_code(S, u);
        return -1;
    }
    if (!(id = PyDict_GetItemWithError(ids, name))) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
        return -1;
    }
    PyObject *node = PyLong_FromLongLong(u);
    int bad = !node || PyDict_SetItem(ctx[4], id, node) < 0;
    Py_XDECREF(node);
    return bad ? -1 : 0;
}

/* lift_all(rules, counted, live, symbol_spans, cfg_origins, ids, shapes, shape_of, kept, names, origins, rule_sets,
 * deadline[, representatives, atom_of, format_byteset]) -> None: gnf._lift_terminals's loop over the byte CFG's rules
 * (one nonterminal per terminal occurrence) in one call: deadline.check per rule (deadline None: none), each live
 * rule that is not counted lifted (lift_one_rule), in the rules' order; kept: the partition's shapes (lift_shape),
 * a missing one made here (lift_new_shape) where the partition's representatives and atom_of are given. */
PyObject *words_lift_all(Words *S, PyObject *args) {
    PyObject *rules, *ids, *deadline, *cfg[5], *ctx[11] = {NULL};
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!OO!O!O!O!O|O!O!O", &PyDict_Type, &rules, &PyDict_Type, &cfg[0],
                          &PySet_Type, &cfg[1], &PyDict_Type, &cfg[2], &PyDict_Type, &cfg[3], &PyDict_Type, &ids,
                          &PyDict_Type, &ctx[0], &ctx[1], &PyDict_Type, &ctx[7], &PyList_Type, &ctx[2], &PyList_Type,
                          &ctx[3], &PyDict_Type, &ctx[4], &deadline, &PyLong_Type, &ctx[8], &PyBytes_Type, &ctx[9],
                          &ctx[10]))
        return NULL;
    if (ctx[8] && (!ctx[10] || PyBytes_GET_SIZE(ctx[9]) != 256)) {
        PyErr_SetString(PyExc_ValueError, "lift_all: representatives, atom_of (256 bytes) and format_byteset");
        return NULL;
    }
    PyObject *stage = PyUnicode_FromString("the normal form (terminal lifting)"), *name, *alts;
    cfg[4] = PyTuple_New(0); /* the spans of a rule symbol_spans lacks */
    Py_ssize_t pos = 0;
    int bad = !stage || !cfg[4];
    while (!bad && PyDict_Next(rules, &pos, &name, &alts)) {
        if (deadline != Py_None) {
            PyObject *r = PyObject_CallMethod(deadline, "check", "O", stage);
            bad = !r;
            Py_XDECREF(r);
        }
        bad = bad || lift_one_rule(S, name, alts, cfg, ids, ctx) < 0;
    }
    Py_XDECREF(stage);
    Py_XDECREF(cfg[4]);
    return bad ? NULL : Py_NewRef(Py_None);
}

/* A byte set's bits (a Python int under 2**256) as four 64-bit words, low first; 1 where it has bits past
 * 255 (a token atom's), -1 with the exception set. */
static int byte_words(PyObject *bits, uint64_t *w) {
    PyObject *x = Py_NewRef(bits), *shift = PyLong_FromLong(64);
    int rc = shift ? 0 : -1;
    for (int k = 0; rc == 0 && k < 5; k++) {
        uint64_t v = PyLong_AsUnsignedLongLongMask(x);
        PyObject *rest = v == (uint64_t)-1 && PyErr_Occurred() ? NULL : PyNumber_Rshift(x, shift);
        if (!rest) rc = -1;
        else if (k < 4) w[k] = v;
        else rc = v != 0 || PyObject_IsTrue(rest); /* (bits >> 256: a token atom's) */
        Py_XSETREF(x, rest);
    }
    Py_XDECREF(x);
    Py_XDECREF(shift);
    return rc;
}

/* Four 64-bit words, low first, as a Python int; NULL with the exception set. */
static PyObject *words_int(const uint64_t *w) {
    PyObject *x = PyLong_FromUnsignedLongLong(w[3]), *shift = PyLong_FromLong(64);
    for (int k = 2; x && shift && k >= 0; k--) {
        PyObject *low = PyLong_FromUnsignedLongLong(w[k]), *up = low ? PyNumber_Lshift(x, shift) : NULL;
        Py_XSETREF(x, up ? PyNumber_Or(up, low) : NULL);
        Py_XDECREF(low);
        Py_XDECREF(up);
    }
    Py_XDECREF(shift);
    return x;
}

/* gnf_byte_atoms(bits) -> (atoms' bits, atom_of) or None: cfg.byte_classes of byte sets given by their bits, in
 * C: every set splits every block it cuts, from the block of all 256 bytes (the partition is the same in any
 * order); the atoms numbered by their smallest byte, atom_of (bytes) each byte's. None where a set has bits
 * past 255 (token atoms: the Python partition). */
PyObject *gnf_byte_atoms(PyObject *self, PyObject *bits_obj) {
    PyObject *seq = PySequence_Fast(bits_obj, "byte_atoms: the sets' bits"), *out = NULL, *atoms = NULL;
    if (!seq) return NULL;
    uint64_t blocks[256][4], w[4], first[256][4];
    int nb = 1, rc = 0;
    unsigned char block_of[256], atom_of[256];
    blocks[0][0] = blocks[0][1] = blocks[0][2] = blocks[0][3] = ~(uint64_t)0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        if ((rc = byte_words(PySequence_Fast_GET_ITEM(seq, i), w)) != 0) break;
        for (int k = 0, n0 = nb; k < n0; k++) {
            uint64_t in[4], any_in = 0, any_out = 0;
            for (int j = 0; j < 4; j++) {
                in[j] = blocks[k][j] & w[j];
                any_in |= in[j];
                any_out |= blocks[k][j] ^ in[j];
            }
            if (!any_in || !any_out) continue;
            for (int j = 0; j < 4; j++) {
                blocks[nb][j] = blocks[k][j] ^ in[j];
                blocks[k][j] = in[j];
            }
            nb++;
        }
    }
    if (rc != 0) { /* -1: the exception set; 1: a token atom */
        Py_DECREF(seq);
        return rc < 0 ? NULL : Py_NewRef(Py_None);
    }
    Py_DECREF(seq);
    for (int k = 0; k < nb; k++)
        for (int j = 0; j < 4; j++)
            for (uint64_t m = blocks[k][j]; m; m &= m - 1) block_of[64 * j + __builtin_ctzll(m)] = (unsigned char)k;
    int number[256], na = 0;
    for (int k = 0; k < nb; k++) number[k] = -1;
    for (int b = 0; b < 256; b++) { /* atoms by smallest byte */
        int k = block_of[b];
        if (number[k] < 0) {
            number[k] = na;
            memcpy(first[na++], blocks[k], sizeof(w));
        }
        atom_of[b] = (unsigned char)number[k];
    }
    atoms = PyList_New(na);
    for (int a = 0; atoms && a < na; a++) {
        PyObject *x = words_int(first[a]);
        if (!x) Py_CLEAR(atoms);
        else PyList_SET_ITEM(atoms, a, x);
    }
    PyObject *of = atoms ? PyBytes_FromStringAndSize((const char *)atom_of, 256) : NULL;
    if (of) out = PyTuple_Pack(2, atoms, of);
    Py_XDECREF(of);
    Py_XDECREF(atoms);
    return out;
}
