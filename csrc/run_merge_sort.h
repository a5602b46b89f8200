/* One sort for the compiled core's hot sorts (words.c: a union's terms and its gathered edges; gnf_passes.c:
 * a node's renamed edges), with the comparison inline: qsort's calls through a comparator were ~25% of a
 * counted schema's merging and ~15% of its classing (docs/ttfm_profile.md). Each had its own copy of it.
 *
 * RUN_MERGE_SORT(name, T, LESS) defines `static void name(T *a, T *tmp, int64_t n)`: a stable sort of
 * a[0:n] through tmp (room for n more T): insertion-sorted runs (one run up to 32 items, else runs of 16),
 * then bottom-up merges. LESS(x, y), on two `const T *`, is the strict order. */
#ifndef CFGZIP_RUN_MERGE_SORT_H
#define CFGZIP_RUN_MERGE_SORT_H
#include <stdint.h>
#include <string.h>

#define RUN_MERGE_SORT(name, T, LESS)                                                                      \
    static void name(T *a, T *tmp, int64_t n) {                                                            \
        int64_t run = n <= 32 ? n : 16;                                                                    \
        for (int64_t lo = 0; lo < n; lo += run) {                                                          \
            int64_t hi = lo + run < n ? lo + run : n;                                                      \
            for (int64_t i = lo + 1; i < hi; i++) {                                                        \
                T v = a[i];                                                                                \
                int64_t j = i;                                                                             \
                while (j > lo && LESS(&v, &a[j - 1])) {                                                    \
                    a[j] = a[j - 1];                                                                       \
                    j--;                                                                                   \
                }                                                                                          \
                a[j] = v;                                                                                  \
            }                                                                                              \
        }                                                                                                  \
        T *src = a, *dst = tmp;                                                                            \
        for (int64_t width = run; width < n; width *= 2) {                                                 \
            for (int64_t lo = 0; lo < n; lo += 2 * width) {                                                \
                int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n; \
                int64_t i = lo, j = mid, o = lo;                                                           \
                while (i < mid && j < hi) dst[o++] = LESS(&src[j], &src[i]) ? src[j++] : src[i++];        \
                while (i < mid) dst[o++] = src[i++];                                                       \
                while (j < hi) dst[o++] = src[j++];                                                        \
            }                                                                                              \
            T *t = src;                                                                                    \
            src = dst;                                                                                     \
            dst = t;                                                                                       \
        }                                                                                                  \
        if (src != a) memcpy(a, src, (size_t)n * sizeof(T));                                              \
    }

#endif
