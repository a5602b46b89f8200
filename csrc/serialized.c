/* The byte CFG's productions read from XGrammar's serialized grammar (cfgzip_lab/grammar/serialized.py): the walk
 * of _Converter.rule / alternatives / symbols over the expression arrays, and over the printed text beside them for
 * the symbols' spans, in C. The Python methods are the reference (tests/test_serialized.py compares the two walks
 * on MaskBench and the JSON-Schema-Test-Suite, and each with the text path, parse_ebnf + lower):
 *
 *   serialized_rules(conv, rules, root, starts, byte_table, origin_type, unsupported) -> None
 *       _live_rules, the rules' names and origins (_Converter.__init__), then _Converter.rule(r, rules[r],
 *       starts[r], starts[r + 1] - 1) for each live rule r
 *   json_ints(text, pos) -> (list of int, end)
 *       json.loads of the JSON array of integers at text[pos] (serialize_json's two expression arrays, most of
 *       its text), and where it ends; ValueError for anything else (serialized._read_serialized then reads the
 *       whole text with json.loads)
 *
 * conv is the _Converter: the walk reads its data and indptr (lists of int), names, text, classes and counters, and
 * fills its rules, origins and spans (the CFG's) in the order the Python walk does: the helpers of classes, class
 * stars and choices made here as char_class, star and fresh make them (names owner@n counted in conv.counters, a
 * class's byte sequences by conv.class_sequences, each Origin as provenance._make_origin makes it), repetitions
 * and regex bodies by conv.repeat and conv.regex, called back in the walk's order (conv.line and conv.line_start
 * set per rule for the origins they make). byte_table is lower._BYTE
 * (the byte sets of the 256 bytes). Anything the Python walk refuses raises `unsupported` (serialized.Unsupported),
 * and so does what it would fail on otherwise (an index out of the arrays): the pipeline takes the text path.
 * A median MaskBench schema's walk was ~0.4 ms of Python.
 */
#include "methods.h"
#include "structmember.h"

/* GrammarExprType in XGrammar's cpp/grammar_impl.h (serialized.py's constants). */
enum { X_BYTES = 0, X_CLASS = 1, X_STAR = 2, X_EMPTY = 3, X_REF = 4, X_SEQ = 5, X_CHOICES = 6, X_REPEAT = 8,
       X_REGEX = 12 };

#define WALK_DEPTH 1000 /* nesting inside one rule's body; deeper: the text path */

typedef struct {
    int32_t *data, *indptr;
    Py_ssize_t ndata, nexpr;
    PyObject *conv, *names, *text, *classes, *rules, *spans, *bytes, *unsupported; /* borrowed */
    PyObject *origins, *counters, *class_sequences, *origin_type;                 /* borrowed */
    Py_ssize_t origin_slot[6]; /* where an Origin holds rule, kind, span, line, column, excerpt */
    Py_ssize_t line, line_start; /* the rule's line (1-based) and where it starts, for origins */
    int kind;
    const void *chars;
    Py_ssize_t len;
    int depth;
} Walk;

static Py_ssize_t walk_symbols(Walk *w, PyObject *owner, Py_ssize_t s, Py_ssize_t outer, Py_ssize_t pos,
                               Py_ssize_t wrap, PyObject *out, PyObject *at);
static Py_ssize_t walk_alternatives(Walk *w, PyObject *owner, Py_ssize_t i, Py_ssize_t pos, PyObject *prods,
                                    PyObject *spans);

/* The span (start, end), a new tuple (without Py_BuildValue, which parses its format per call). */
static PyObject *span_of(Py_ssize_t start, Py_ssize_t end) {
    PyObject *a = PyLong_FromSsize_t(start), *b = a ? PyLong_FromSsize_t(end) : NULL;
    PyObject *span = b ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return span;
}

/* -1 with `unsupported` raised: what the Python walk refuses (or would fail on). */
static Py_ssize_t refuse(Walk *w, const char *why) {
    PyErr_SetString(w->unsupported, why);
    return -1;
}

/* A list of ints as a malloc'd int32 array (its length in *n); NULL with the exception set. */
static int32_t *int_array(PyObject *list, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(list, "a serialized array");
    if (!fast) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    int32_t *out = malloc((*n ? *n : 1) * sizeof(int32_t));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "a serialized value past int32");
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    return out;
}

/* The data offset of expression i (its type and length in *t, *n), checked against the arrays; -1 refused. */
static Py_ssize_t expr_at(Walk *w, Py_ssize_t i, int32_t *t, int32_t *n) {
    if (i < 0 || i >= w->nexpr) return refuse(w, "an expression out of the arrays");
    Py_ssize_t s = w->indptr[i];
    if (s < 0 || s + 2 > w->ndata) return refuse(w, "an expression out of the arrays");
    *t = w->data[s];
    *n = w->data[s + 1];
    if (*n < 0 || s + 2 + *n > w->ndata) return refuse(w, "an expression out of the arrays");
    return s;
}

/* Past groups of one (a sequence or a choice of one element): the element's offset, the groups counted in *wrap. */
static Py_ssize_t unwrap(Walk *w, Py_ssize_t s, int32_t *t, int32_t *n, Py_ssize_t *wrap) {
    while (*n == 1 && (*t == X_SEQ || *t == X_CHOICES)) {
        if (++*wrap > WALK_DEPTH) return refuse(w, "groups nested too deeply");
        s = expr_at(w, w->data[s + 2], t, n);
        if (s < 0) return -1;
    }
    return s;
}

/* Where the literal ("...") or class ([...]) printed at pos ends, escapes consumed whole (serialized._end). */
static Py_ssize_t printed_end(Walk *w, Py_ssize_t pos, Py_UCS4 open, Py_UCS4 close) {
    if (pos < 0 || pos >= w->len || PyUnicode_READ(w->kind, w->chars, pos) != open)
        return refuse(w, "no literal or class where the walk stands");
    for (Py_ssize_t i = pos + 1; i < w->len; i++) {
        Py_UCS4 c = PyUnicode_READ(w->kind, w->chars, i);
        if (c == '\\')
            i++;
        else if (c == close)
            return i + 1;
    }
    return refuse(w, "a literal or class that does not end");
}

/* ---- helper nonterminals and origins (_Converter.origin, fresh, star) ---- */

#define EXCERPT_WIDTH 40 /* provenance.origin_at's */

/* The excerpt an origin shows of text[start:end], as _Converter.origin makes it: whitespace runs collapsed to one
 * space and the ends trimmed (" ".join(excerpt.split()), which is the excerpt itself where every character prints
 * and none is a space: the only whitespace that prints is the space), then past EXCERPT_WIDTH characters its first
 * EXCERPT_WIDTH - 1 and an ellipsis. Only the collapsed text's first EXCERPT_WIDTH + 1 characters are made. */
static PyObject *short_excerpt(Walk *w, Py_ssize_t start, Py_ssize_t end) {
    Py_UCS4 out[EXCERPT_WIDTH + 1];
    int n = 0, pending = 0;
    for (Py_ssize_t i = start; i < end && n <= EXCERPT_WIDTH; i++) {
        Py_UCS4 c = PyUnicode_READ(w->kind, w->chars, i);
        if (Py_UNICODE_ISSPACE(c)) {
            pending = n > 0;
            continue;
        }
        if (pending) { /* (a space only before a character: the collapsed text goes on past it) */
            out[n++] = ' ';
            pending = 0;
            if (n > EXCERPT_WIDTH) break;
        }
        out[n++] = c;
    }
    if (n > EXCERPT_WIDTH) {
        n = EXCERPT_WIDTH - 1;
        out[n++] = 0x2026; /* … */
    }
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, n);
}

/* Where provenance.Origin (a frozen dataclass with slots) holds each field, from its member descriptors; 0, or -1
 * with the exception set (another layout). */
static int origin_slots(Walk *w) {
    static const char *fields[6] = {"rule", "kind", "span", "line", "column", "excerpt"};
    if (!PyType_Check(w->origin_type)) {
        PyErr_SetString(PyExc_TypeError, "serialized_rules: origin_type is not a type");
        return -1;
    }
    for (int k = 0; k < 6; k++) {
        PyObject *d = PyObject_GetAttrString(w->origin_type, fields[k]);
        int ok = d && Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) w->origin_slot[k] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_XDECREF(d);
        if (!ok) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "serialized_rules: an Origin without its slots");
            return -1;
        }
    }
    return 0;
}

/* _Converter.origin: the Origin of `kind` at span (start, end) on the current line, in rule, made as
 * provenance._make_origin makes it (the type's allocation, then its six slots set); a new reference, or NULL. */
static PyObject *origin_of(Walk *w, PyObject *rule, const char *kind, PyObject *span) {
    Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 0)), end = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 1));
    PyObject *fields[6] = {rule, PyUnicode_InternFromString(kind), span, PyLong_FromSsize_t(w->line),
                           PyLong_FromSsize_t(start - w->line_start + 1), short_excerpt(w, start, end)};
    PyTypeObject *type = (PyTypeObject *)w->origin_type;
    PyObject *origin = fields[1] && fields[3] && fields[4] && fields[5] ? type->tp_alloc(type, 0) : NULL;
    for (int k = 0; origin && k < 6; k++) *(PyObject **)((char *)origin + w->origin_slot[k]) = Py_NewRef(fields[k]);
    for (int k = 1; k < 6; k++)
        if (k != 2) Py_XDECREF(fields[k]);
    return origin;
}

/* The next helper name of owner (owner@n, conv.counters counting per owner); a new reference, or NULL. */
static PyObject *fresh_name(Walk *w, PyObject *owner) {
    PyObject *was = PyDict_GetItemWithError(w->counters, owner);
    if (!was && PyErr_Occurred()) return NULL;
    Py_ssize_t n = was ? PyLong_AsSsize_t(was) + 1 : 1;
    PyObject *count = PyLong_FromSsize_t(n);
    if (!count || PyDict_SetItem(w->counters, owner, count) < 0) {
        Py_XDECREF(count);
        return NULL;
    }
    Py_DECREF(count);
    char tail[32];
    snprintf(tail, sizeof tail, "@%zd", n);
    PyObject *suffix = PyUnicode_FromString(tail), *name = suffix ? PyUnicode_Concat(owner, suffix) : NULL;
    Py_XDECREF(suffix);
    return name;
}

/* A helper nonterminal (_Converter.fresh): its productions, origin and spans into the CFG, in that order. */
static PyObject *fresh(Walk *w, PyObject *owner, PyObject *alts, const char *kind, PyObject *span, PyObject *spans) {
    PyObject *name = fresh_name(w, owner), *origin = NULL;
    if (!name || PyDict_SetItem(w->rules, name, alts) < 0 || !(origin = origin_of(w, owner, kind, span)) ||
        PyDict_SetItem(w->origins, name, origin) < 0 || PyDict_SetItem(w->spans, name, spans) < 0)
        Py_CLEAR(name);
    Py_XDECREF(origin);
    return name;
}

/* item* as star -> () | (item, star) (_Converter.star): the helper's name, or NULL. */
static PyObject *star(Walk *w, PyObject *owner, PyObject *item, PyObject *item_span, PyObject *span) {
    PyObject *name = fresh_name(w, owner);
    if (!name) return NULL;
    PyObject *empty = PyTuple_New(0);
    PyObject *alts = empty ? Py_BuildValue("[O(OO)]", empty, item, name) : NULL;
    PyObject *spans = alts ? Py_BuildValue("[O(OO)]", empty, item_span, span) : NULL;
    PyObject *origin = NULL;
    if (!spans || PyDict_SetItem(w->rules, name, alts) < 0 || !(origin = origin_of(w, owner, "repetition", span)) ||
        PyDict_SetItem(w->origins, name, origin) < 0 || PyDict_SetItem(w->spans, name, spans) < 0)
        Py_CLEAR(name);
    Py_XDECREF(empty);
    Py_XDECREF(alts);
    Py_XDECREF(spans);
    Py_XDECREF(origin);
    return name;
}

/* Append `symbol` and its span (start, end) to out and at (a new span tuple each). 0, or -1. */
static int append_spanned(PyObject *out, PyObject *at, PyObject *symbol, Py_ssize_t start, Py_ssize_t end) {
    PyObject *span = span_of(start, end);
    if (!span) return -1;
    int bad = PyList_Append(out, symbol) < 0 || PyList_Append(at, span) < 0;
    Py_DECREF(span);
    return bad ? -1 : 0;
}

/* Whether the n bytes are printed as they are: no NUL (XGrammar prints it as the literal's end) and, with a byte
 * past ASCII, valid UTF-8 (else they print as code points). 1, 0, or -1 refused (a value past a byte). */
static int spelled(Walk *w, const int32_t *chunk, int32_t n) {
    int high = 0;
    for (int32_t k = 0; k < n; k++) {
        if (chunk[k] < 0 || chunk[k] > 255) return (int)refuse(w, "a byte string value past a byte");
        if (chunk[k] == 0) return 0;
        high |= chunk[k] >= 0x80;
    }
    if (!high) return 1;
    char *buf = malloc(n);
    if (!buf) return (int)refuse(w, "no memory for a byte string");
    for (int32_t k = 0; k < n; k++) buf[k] = (char)chunk[k];
    PyObject *decoded = PyUnicode_DecodeUTF8(buf, n, "strict");
    free(buf);
    if (decoded) {
        Py_DECREF(decoded);
        return 1;
    }
    PyErr_Clear();
    return 0;
}

/* A byte string: one byte set per byte, each spanned by the whole literal (and its groups of one). */
static Py_ssize_t walk_bytes(Walk *w, Py_ssize_t s, int32_t n, Py_ssize_t outer, Py_ssize_t pos, Py_ssize_t wrap,
                             PyObject *out, PyObject *at) {
    Py_ssize_t end = printed_end(w, pos, '"', '"');
    if (end < 0) return -1;
    end += wrap;
    const int32_t *chunk = w->data + s + 2;
    int ok = n ? spelled(w, chunk, n) : 1;
    if (ok < 0) return -1;
    if (!ok) return refuse(w, "a byte string the printed EBNF does not spell");
    PyObject *span = span_of(outer, end);
    if (!span) return -1;
    for (int32_t k = 0; k < n; k++) {
        if (PyList_Append(out, PyTuple_GET_ITEM(w->bytes, chunk[k])) < 0 || PyList_Append(at, span) < 0) {
            Py_DECREF(span);
            return -1;
        }
    }
    Py_DECREF(span);
    return end;
}

/* The symbol of a class not made yet, as _Converter.char_class makes it from its data raw = (negated, lo, hi, ...):
 * its byte sequences (lower._class_byte_sequences, conv.class_sequences) as one byte set, or a helper nonterminal
 * ("character class") of them, or of none. A new reference, or NULL. */
static PyObject *new_class(Walk *w, PyObject *owner, PyObject *raw, PyObject *span) {
    Py_ssize_t npairs = (PyTuple_GET_SIZE(raw) - 1) / 2; /* (zip of the odd and the even items past the first) */
    PyObject *ranges = PyTuple_New(npairs), *seqs = NULL, *got = NULL, *alts = NULL, *spans = NULL;
    for (Py_ssize_t k = 0; ranges && k < npairs; k++) {
        PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(raw, 1 + 2 * k), PyTuple_GET_ITEM(raw, 2 + 2 * k));
        if (!pair) Py_CLEAR(ranges);
        else PyTuple_SET_ITEM(ranges, k, pair);
    }
    int negated = PyObject_IsTrue(PyTuple_GET_ITEM(raw, 0));
    if (ranges && negated >= 0)
        seqs = PyObject_CallFunctionObjArgs(w->class_sequences, ranges, negated ? Py_True : Py_False, NULL);
    if (seqs && !PyTuple_Check(seqs)) {
        Py_CLEAR(seqs);
        PyErr_SetString(PyExc_TypeError, "class sequences: a tuple");
    }
    Py_ssize_t nseq = seqs ? PyTuple_GET_SIZE(seqs) : 0;
    if (seqs && nseq == 1 && PyTuple_Check(PyTuple_GET_ITEM(seqs, 0)) && PyTuple_GET_SIZE(PyTuple_GET_ITEM(seqs, 0)) == 1)
        got = Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(seqs, 0), 0));
    else if (seqs && (alts = PySequence_List(seqs)) && (spans = PyList_New(nseq))) {
        for (Py_ssize_t k = 0; spans && k < nseq; k++) {
            Py_ssize_t len = PyObject_Length(PyTuple_GET_ITEM(seqs, k));
            PyObject *one = len >= 0 ? PyTuple_New(len) : NULL;
            for (Py_ssize_t j = 0; one && j < len; j++) PyTuple_SET_ITEM(one, j, Py_NewRef(span));
            if (!one) Py_CLEAR(spans);
            else PyList_SET_ITEM(spans, k, one);
        }
        if (spans) got = fresh(w, owner, alts, "character class", span, spans);
    }
    Py_XDECREF(ranges);
    Py_XDECREF(seqs);
    Py_XDECREF(alts);
    Py_XDECREF(spans);
    return got;
}

/* The symbol of the class at data s (n data), as _Converter.char_class: from conv.classes where made (keyed by its
 * data), else made now and kept there (a new reference, or NULL). */
static PyObject *class_symbol(Walk *w, PyObject *owner, Py_ssize_t s, int32_t n, PyObject *span) {
    if (n < 1) {
        refuse(w, "a class without its data");
        return NULL;
    }
    PyObject *raw = PyTuple_New(n);
    if (!raw) return NULL;
    for (int32_t k = 0; k < n; k++) {
        PyObject *v = PyLong_FromLong(w->data[s + 2 + k]);
        if (!v) {
            Py_DECREF(raw);
            return NULL;
        }
        PyTuple_SET_ITEM(raw, k, v);
    }
    PyObject *got = PyDict_GetItemWithError(w->classes, raw);
    if (got || PyErr_Occurred()) {
        Py_DECREF(raw);
        return got ? Py_NewRef(got) : NULL;
    }
    got = new_class(w, owner, raw, span);
    if (got && PyDict_SetItem(w->classes, raw, got) < 0) Py_CLEAR(got);
    Py_DECREF(raw);
    return got;
}

/* A class ([...]), or a class star ([...]*: a star helper of the class). */
static Py_ssize_t walk_class(Walk *w, PyObject *owner, Py_ssize_t s, int32_t n, int is_star, Py_ssize_t outer,
                             Py_ssize_t pos, Py_ssize_t wrap, PyObject *out, PyObject *at) {
    Py_ssize_t class_end = printed_end(w, pos, '[', ']');
    if (class_end < 0) return -1;
    Py_ssize_t end = class_end + is_star + wrap;
    PyObject *symbol = NULL, *span = span_of(outer, end);
    if (span && !is_star) symbol = class_symbol(w, owner, s, n, span);
    if (span && is_star) {
        PyObject *inner = span_of(pos, class_end);
        PyObject *item = inner ? class_symbol(w, owner, s, n, inner) : NULL;
        symbol = item ? star(w, owner, item, inner, span) : NULL;
        Py_XDECREF(inner);
        Py_XDECREF(item);
    }
    int bad = !symbol || PyList_Append(out, symbol) < 0 || PyList_Append(at, span) < 0;
    Py_XDECREF(symbol);
    Py_XDECREF(span);
    return bad ? -1 : end;
}

/* A choice's options from pos (its opening parenthesis), each appended as productions; where its text ends. */
static Py_ssize_t walk_options(Walk *w, PyObject *owner, Py_ssize_t s, int32_t n, Py_ssize_t pos, PyObject *prods,
                               PyObject *spans) {
    Py_ssize_t p = pos + 1;
    for (int32_t k = 0; k < n; k++) {
        if (k) p += 3; /* " | " */
        p = walk_alternatives(w, owner, w->data[s + 2 + k], p, prods, spans);
        if (p < 0) return -1;
    }
    return p + 1;
}

/* A choice inside a sequence: a helper nonterminal (conv.fresh, "alternation") of its options. */
static Py_ssize_t walk_choice(Walk *w, PyObject *owner, Py_ssize_t s, int32_t n, Py_ssize_t outer, Py_ssize_t pos,
                              Py_ssize_t wrap, PyObject *out, PyObject *at) {
    PyObject *prods = PyList_New(0), *spans = PyList_New(0), *name = NULL;
    Py_ssize_t end = prods && spans ? walk_options(w, owner, s, n, pos, prods, spans) : -1;
    if (end >= 0) {
        end += wrap;
        PyObject *span = span_of(outer, end);
        name = span ? fresh(w, owner, prods, "alternation", span, spans) : NULL;
        if (!name || PyList_Append(out, name) < 0 || PyList_Append(at, span) < 0) end = -1;
        Py_XDECREF(span);
    }
    Py_XDECREF(prods);
    Py_XDECREF(spans);
    Py_XDECREF(name);
    return end;
}

/* A sequence's elements, one space apart inside its parentheses. */
static Py_ssize_t walk_sequence(Walk *w, PyObject *owner, Py_ssize_t s, int32_t n, Py_ssize_t pos, Py_ssize_t wrap,
                                PyObject *out, PyObject *at) {
    Py_ssize_t p = pos + 1;
    for (int32_t k = 0; k < n; k++) {
        if (k) p += 1; /* " " */
        int32_t t2, n2;
        Py_ssize_t w2 = 0, j = expr_at(w, w->data[s + 2 + k], &t2, &n2);
        if (j >= 0) j = unwrap(w, j, &t2, &n2, &w2);
        if (j < 0) return -1;
        p = walk_symbols(w, owner, j, p, p + w2, w2, out, at);
        if (p < 0) return -1;
    }
    return p + 1 + wrap;
}

/* A rule reference: its name, spanned by the name (and its groups of one); the text is not read. */
static Py_ssize_t walk_ref(Walk *w, Py_ssize_t s, int32_t n, Py_ssize_t outer, Py_ssize_t pos, Py_ssize_t wrap,
                           PyObject *out, PyObject *at) {
    if (n < 1) return refuse(w, "a rule reference without its rule");
    int32_t k = w->data[s + 2];
    if (k < 0 || k >= PyList_GET_SIZE(w->names)) return refuse(w, "a rule reference out of the rules");
    PyObject *name = PyList_GET_ITEM(w->names, k);
    Py_ssize_t end = pos + PyUnicode_GET_LENGTH(name) + wrap;
    return append_spanned(out, at, name, outer, end) < 0 ? -1 : end;
}

/* _Converter.symbols: the symbols of the expression at data s (its own text at pos, inside wrap groups of one
 * that start at outer) appended to out, their spans to at; where those groups end, or -1. */
static Py_ssize_t walk_symbols(Walk *w, PyObject *owner, Py_ssize_t s, Py_ssize_t outer, Py_ssize_t pos,
                               Py_ssize_t wrap, PyObject *out, PyObject *at) {
    int32_t t = w->data[s], n = w->data[s + 1];
    if (++w->depth > WALK_DEPTH) return refuse(w, "expressions nested too deeply");
    Py_ssize_t end;
    switch (t) {
    case X_BYTES: end = walk_bytes(w, s, n, outer, pos, wrap, out, at); break;
    case X_REF: end = walk_ref(w, s, n, outer, pos, wrap, out, at); break;
    case X_SEQ: end = walk_sequence(w, owner, s, n, pos, wrap, out, at); break;
    case X_CLASS: end = walk_class(w, owner, s, n, 0, outer, pos, wrap, out, at); break;
    case X_STAR: end = walk_class(w, owner, s, n, 1, outer, pos, wrap, out, at); break;
    case X_EMPTY: end = pos + 2 + wrap; break;
    case X_CHOICES: end = walk_choice(w, owner, s, n, outer, pos, wrap, out, at); break;
    case X_REPEAT: {
        PyObject *got = PyObject_CallMethod(w->conv, "repeat", "OnnnnOO", owner, s, outer, pos, wrap, out, at);
        end = got ? PyLong_AsSsize_t(got) : -1;
        Py_XDECREF(got);
        break;
    }
    default: end = refuse(w, "an expression type inside a rule that the walk does not read");
    }
    w->depth--;
    return end;
}

/* _Converter.alternatives: the productions of expression i printed at pos (a choice's options, each flattened)
 * appended to prods and their spans to spans; where its text ends, or -1. */
static Py_ssize_t walk_alternatives(Walk *w, PyObject *owner, Py_ssize_t i, Py_ssize_t pos, PyObject *prods,
                                    PyObject *spans) {
    int32_t t, n;
    Py_ssize_t wrap = 0, s = expr_at(w, i, &t, &n);
    if (s >= 0) s = unwrap(w, s, &t, &n, &wrap);
    if (s < 0) return -1;
    if (++w->depth > WALK_DEPTH) return refuse(w, "expressions nested too deeply");
    Py_ssize_t end;
    if (t == X_CHOICES) {
        end = walk_options(w, owner, s, n, pos + wrap, prods, spans);
        end = end < 0 ? -1 : end + wrap;
    } else {
        PyObject *out = PyList_New(0), *at = PyList_New(0), *rhs = NULL, *rhs_at = NULL;
        end = out && at ? walk_symbols(w, owner, s, pos, pos + wrap, wrap, out, at) : -1;
        if (end >= 0) {
            rhs = PyList_AsTuple(out);
            rhs_at = rhs ? PyList_AsTuple(at) : NULL;
            if (!rhs_at || PyList_Append(prods, rhs) < 0 || PyList_Append(spans, rhs_at) < 0) end = -1;
        }
        Py_XDECREF(out);
        Py_XDECREF(at);
        Py_XDECREF(rhs);
        Py_XDECREF(rhs_at);
    }
    w->depth--;
    return end;
}

/* Whether text[at:] starts with prefix (1, 0; -1 with the exception set). */
static int text_at(Walk *w, PyObject *prefix, Py_ssize_t at) {
    if (at < 0 || at > w->len) return 0;
    return (int)PyUnicode_Tailmatch(w->text, prefix, at, PY_SSIZE_T_MAX, -1);
}

/* Set the current line (line, line_start) for the origins made here and by conv's callbacks. 0, or -1. */
static int set_line(Walk *w, Py_ssize_t line, Py_ssize_t start) {
    w->line = line;
    w->line_start = start;
    PyObject *a = PyLong_FromSsize_t(line), *b = PyLong_FromSsize_t(start);
    int bad = !a || !b || PyObject_SetAttrString(w->conv, "line", a) < 0 ||
              PyObject_SetAttrString(w->conv, "line_start", b) < 0;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return bad ? -1 : 0;
}

/* A body that is not a regex: its productions and spans into the CFG's rules and spans. Where it ends, or -1. */
static Py_ssize_t walk_body(Walk *w, PyObject *name, Py_ssize_t body, Py_ssize_t at) {
    PyObject *prods = PyList_New(0), *spans = PyList_New(0);
    w->depth = 0;
    Py_ssize_t end = prods && spans ? walk_alternatives(w, name, body, at, prods, spans) : -1;
    if (end >= 0 && (PyDict_SetItem(w->rules, name, prods) < 0 || PyDict_SetItem(w->spans, name, spans) < 0))
        end = -1;
    Py_XDECREF(prods);
    Py_XDECREF(spans);
    return end;
}

/* _Converter.rule: rule r ([name, body, lookahead, ...]) on its line from start to line_end. 0, or -1. */
static int walk_rule(Walk *w, Py_ssize_t r, PyObject *rule, Py_ssize_t start, Py_ssize_t line_end) {
    if (!PyList_Check(rule) || PyList_GET_SIZE(rule) < 3) return (int)refuse(w, "a rule that is not a list");
    PyObject *name = PyList_GET_ITEM(w->names, r);
    Py_ssize_t body = PyLong_AsSsize_t(PyList_GET_ITEM(rule, 1));
    Py_ssize_t lookahead = PyLong_AsSsize_t(PyList_GET_ITEM(rule, 2));
    if (PyErr_Occurred()) return -1;
    PyObject *head = PyUnicode_FromFormat("%U ::= ", name);
    int found = head ? text_at(w, head, start) : -1;
    Py_XDECREF(head);
    if (found <= 0) return found < 0 ? -1 : (int)refuse(w, "a rule not at its line");
    if (set_line(w, r + 1, start) < 0) return -1;
    Py_ssize_t at = start + PyUnicode_GET_LENGTH(name) + 5, end;
    int32_t t, n;
    Py_ssize_t s = expr_at(w, body, &t, &n);
    if (s < 0) return -1;
    if (t == X_REGEX) {
        PyObject *got = PyObject_CallMethod(w->conv, "regex", "Onn", name, s, at);
        end = got ? PyLong_AsSsize_t(got) : -1;
        Py_XDECREF(got);
    } else {
        end = walk_body(w, name, body, at);
    }
    if (end < 0) return -1;
    PyObject *look = PyUnicode_FromString(" (=");
    found = look ? text_at(w, look, end) : -1;
    Py_XDECREF(look);
    if (found < 0) return -1;
    if ((lookahead != -1 && !found) || (lookahead == -1 && end != line_end))
        return (int)refuse(w, "a rule's body does not end where the walk ends");
    return 0;
}

#define NHELD 10

/* conv's attributes the walk reads (new references into *held, borrowed into w); 0, or -1. */
static int walk_open(Walk *w, PyObject *held[NHELD]) {
    static const char *attrs[NHELD] = {"data", "indptr", "names", "text", "classes", "rules", "spans", "origins",
                                       "counters", "class_sequences"};
    for (int k = 0; k < NHELD; k++)
        if (!(held[k] = PyObject_GetAttrString(w->conv, attrs[k]))) return -1;
    w->names = held[2];
    w->text = held[3];
    w->classes = held[4];
    w->rules = held[5];
    w->spans = held[6];
    w->origins = held[7];
    w->counters = held[8];
    w->class_sequences = held[9];
    int dicts = PyDict_Check(w->classes) && PyDict_Check(w->rules) && PyDict_Check(w->spans) &&
                PyDict_Check(w->origins) && PyDict_Check(w->counters);
    if (!dicts || !PyList_Check(w->names) || !PyUnicode_Check(w->text) || !PyTuple_Check(w->bytes) ||
        PyTuple_GET_SIZE(w->bytes) != 256) {
        PyErr_SetString(PyExc_TypeError, "serialized_rules: a converter of other types");
        return -1;
    }
    w->kind = PyUnicode_KIND(w->text);
    w->chars = PyUnicode_DATA(w->text);
    w->len = PyUnicode_GET_LENGTH(w->text);
    if (!(w->data = int_array(held[0], &w->ndata))) return -1;
    if (!(w->indptr = int_array(held[1], &w->nexpr))) return -1;
    return 0;
}

/* Mark rule k live (and to do) where it is not yet; 0, or -1 refused (no such rule). */
static int reach(Walk *w, int32_t k, Py_ssize_t nrules, char *live, Py_ssize_t *todo, Py_ssize_t *ntodo) {
    if (k < 0 || k >= nrules) return (int)refuse(w, "a rule reference out of the rules");
    if (!live[k]) {
        live[k] = 1;
        todo[(*ntodo)++] = k;
    }
    return 0;
}

/* The rule's body expression (rules[r][1]); -1 with an exception set. */
static Py_ssize_t body_of(Walk *w, PyObject *rules, Py_ssize_t r) {
    PyObject *rule = PyList_GET_ITEM(rules, r);
    if (!PyList_Check(rule) || PyList_GET_SIZE(rule) < 3) return refuse(w, "a rule that is not a list");
    return PyLong_AsSsize_t(PyList_GET_ITEM(rule, 1));
}

/* serialized._live_rules: live[r] for each rule the root reaches through rule bodies (lookaheads dropped, as the
 * parse drops them); 0, or -1 (an expression type it does not read refused). */
static int live_rules(Walk *w, PyObject *rules, Py_ssize_t root, char *live) {
    Py_ssize_t nrules = PyList_GET_SIZE(rules), ntodo = 0, nstack = 0, budget = 64 * (w->ndata + 16);
    Py_ssize_t *todo = malloc((nrules + 1) * sizeof(Py_ssize_t)), *stack = malloc((w->ndata + 1) * sizeof(Py_ssize_t));
    int bad = !todo || !stack ? (PyErr_NoMemory(), 1) : reach(w, (int32_t)root, nrules, live, todo, &ntodo) < 0;
    while (!bad && ntodo) {
        Py_ssize_t body = body_of(w, rules, todo[--ntodo]);
        if (body == -1 && PyErr_Occurred()) bad = 1;
        stack[nstack++] = body; /* (the stack is empty here) */
        while (!bad && nstack) {
            int32_t t, n;
            Py_ssize_t s = expr_at(w, stack[--nstack], &t, &n);
            if (s < 0 || --budget < 0) bad = s < 0 || refuse(w, "expressions that contain themselves");
            else if (t == X_REF || t == X_REPEAT)
                bad = n < 1 ? refuse(w, "a rule reference without its rule") : reach(w, w->data[s + 2], nrules, live, todo, &ntodo);
            else if ((t == X_SEQ || t == X_CHOICES) && nstack + n > w->ndata)
                bad = refuse(w, "expressions shared past the walk's stack");
            else if (t == X_SEQ || t == X_CHOICES)
                for (int32_t k = 0; k < n; k++) stack[nstack++] = w->data[s + 2 + k];
            else if (t != X_BYTES && t != X_CLASS && t != X_STAR && t != X_EMPTY && t != X_REGEX)
                bad = refuse(w, "an expression type the walk does not read");
        }
    }
    free(todo);
    free(stack);
    return bad ? -1 : 0;
}

/* Every live rule named first, in rule order, with its origin (the whole line), as lower() names them. */
static int name_rules(Walk *w, PyObject *order, PyObject *starts) {
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(order); k++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyList_GET_ITEM(order, k));
        PyObject *name = PyList_GET_ITEM(w->names, r), *origin = NULL, *alts = PyList_New(0);
        Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(starts, r));
        PyObject *span = span_of(start, PyLong_AsSsize_t(PyList_GET_ITEM(starts, r + 1)) - 1);
        w->line = r + 1;
        w->line_start = start;
        int bad = !alts || !span || PyDict_SetItem(w->rules, name, alts) < 0 ||
                  !(origin = origin_of(w, name, "rule", span)) || PyDict_SetItem(w->origins, name, origin) < 0;
        Py_XDECREF(alts);
        Py_XDECREF(span);
        Py_XDECREF(origin);
        if (bad) return -1;
    }
    return 0;
}

/* Each rule of order walked in turn (_Converter.rule). 0, or -1. */
static int walk_order(Walk *w, PyObject *rules, PyObject *order, PyObject *starts) {
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(order); k++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyList_GET_ITEM(order, k));
        Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(starts, r));
        Py_ssize_t next = PyLong_AsSsize_t(PyList_GET_ITEM(starts, r + 1));
        if (PyErr_Occurred()) return -1;
        if (walk_rule(w, r, PyList_GET_ITEM(rules, r), start, next - 1) < 0) return -1;
    }
    return 0;
}

/* The live rules in rule order, as a list of ints; NULL with the exception set. */
static PyObject *live_order(Walk *w, PyObject *rules, Py_ssize_t root, Py_ssize_t nstarts) {
    Py_ssize_t nrules = PyList_GET_SIZE(rules);
    if (nrules > PyList_GET_SIZE(w->names) || nstarts != nrules + 1) {
        refuse(w, "rules, names and lines of other counts");
        return NULL;
    }
    char *live = calloc(nrules + 1, 1);
    PyObject *order = live ? PyList_New(0) : PyErr_NoMemory();
    if (order && live_rules(w, rules, root, live) < 0) Py_CLEAR(order);
    for (Py_ssize_t r = 0; order && r < nrules; r++) {
        PyObject *v = live[r] ? PyLong_FromSsize_t(r) : NULL;
        if (live[r] && (!v || PyList_Append(order, v) < 0)) Py_CLEAR(order);
        Py_XDECREF(v);
    }
    free(live);
    return order;
}

PyObject *serialized_rules(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rules, *starts, *order = NULL, *held[NHELD] = {NULL};
    Py_ssize_t root;
    Walk w = {0};
    if (!PyArg_ParseTuple(args, "OO!nO!OOO", &w.conv, &PyList_Type, &rules, &root, &PyList_Type, &starts, &w.bytes,
                          &w.origin_type, &w.unsupported))
        return NULL;
    int bad = origin_slots(&w) < 0 || walk_open(&w, held) < 0 || !(order = live_order(&w, rules, root, PyList_GET_SIZE(starts))) ||
              name_rules(&w, order, starts) < 0 || walk_order(&w, rules, order, starts) < 0;
    free(w.data);
    free(w.indptr);
    for (int k = 0; k < NHELD; k++) Py_XDECREF(held[k]);
    Py_XDECREF(order);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* ---- serialize_json's integer arrays ---- */

/* The integer at text[*at] (JSON: an optional minus, then 0 or digits not starting with 0), *at moved past it;
 * 0, or -1 where there is none or it is past int64 (no exception set). */
static int json_int(int kind, const void *chars, Py_ssize_t len, Py_ssize_t *at, long long *value) {
    Py_ssize_t i = *at;
    int negative = i < len && PyUnicode_READ(kind, chars, i) == '-';
    i += negative;
    Py_ssize_t first = i;
    unsigned long long v = 0;
    for (; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, chars, i);
        if (c < '0' || c > '9') break;
        if (v > (ULLONG_MAX - 9) / 10 || i - first > 18) return -1;
        v = v * 10 + (c - '0');
    }
    if (i == first || (i - first > 1 && PyUnicode_READ(kind, chars, first) == '0')) return -1;
    if (i < len) { /* a fraction or an exponent: not an integer of these arrays */
        Py_UCS4 c = PyUnicode_READ(kind, chars, i);
        if (c == '.' || c == 'e' || c == 'E') return -1;
    }
    *value = negative ? -(long long)v : (long long)v;
    *at = i;
    return 0;
}

static Py_ssize_t skip_space(int kind, const void *chars, Py_ssize_t len, Py_ssize_t i) {
    while (i < len) {
        Py_UCS4 c = PyUnicode_READ(kind, chars, i);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        i++;
    }
    return i;
}

/* The integers of the JSON array at text[pos] into out; where the array ends, or -1 (not such an array). */
static Py_ssize_t json_int_items(PyObject *text, Py_ssize_t pos, PyObject *out) {
    int kind = PyUnicode_KIND(text);
    const void *chars = PyUnicode_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), i = skip_space(kind, chars, len, pos + 1);
    if (i < len && PyUnicode_READ(kind, chars, i) == ']') return i + 1;
    for (;;) {
        long long value;
        if (json_int(kind, chars, len, &i, &value) < 0) return -1;
        PyObject *v = PyLong_FromLongLong(value);
        if (!v || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            return -2;
        }
        Py_DECREF(v);
        i = skip_space(kind, chars, len, i);
        Py_UCS4 c = i < len ? PyUnicode_READ(kind, chars, i) : 0;
        if (c == ']') return i + 1;
        if (c != ',') return -1;
        i = skip_space(kind, chars, len, i + 1);
    }
}

PyObject *json_ints(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *text;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!n", &PyUnicode_Type, &text, &pos)) return NULL;
    if (pos < 0 || pos >= PyUnicode_GET_LENGTH(text) || PyUnicode_READ_CHAR(text, pos) != '[') {
        PyErr_SetString(PyExc_ValueError, "json_ints: no array at pos");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    Py_ssize_t end = out ? json_int_items(text, pos, out) : -2;
    if (end == -1) PyErr_SetString(PyExc_ValueError, "json_ints: not an array of integers");
    if (end < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    PyObject *got = Py_BuildValue("(Nn)", out, end);
    return got;
}
