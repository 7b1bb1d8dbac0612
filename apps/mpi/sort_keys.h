/* Sorting for the MPI peers of sample and sampleb (sample.c, sampleb.c): a
 * pattern-defeating-style quicksort of 64-bit keys, binary search, and the P - 1 splitters
 * from every rank's random sample (as volley-apps' sort.rs `splitters`). Include after
 * harness.h, with OVERSAMPLE defined. */
#ifndef VOLLEY_APPS_MPI_SORT_KEYS_H
#define VOLLEY_APPS_MPI_SORT_KEYS_H

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

/* Samples each rank contributes to the choice of splitters. */
#define OVERSAMPLE 256

static inline void swap_u64(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

static inline void insertion_sort(uint64_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        size_t j = i;
        for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
        a[j] = v;
    }
}

static inline void sift_down(uint64_t *a, size_t n, size_t i) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        swap_u64(&a[i], &a[c]);
        i = c;
    }
}

static inline void heap_sort(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(a, n, i);
    for (size_t end = n; end-- > 1;) {
        swap_u64(&a[0], &a[end]);
        sift_down(a, end, 0);
    }
}

/* The index of the median of a[i], a[j], a[k]. */
static inline size_t median3(const uint64_t *a, size_t i, size_t j, size_t k) {
    if (a[i] < a[j]) return a[j] < a[k] ? j : a[i] < a[k] ? k : i;
    return a[i] < a[k] ? i : a[j] < a[k] ? k : j;
}

/* Branchless Lomuto partition of a[1..n) around the pivot a[0]: keys for which the test
 * holds (key < pivot, or key <= pivot when `le`) first; returns how many, plus one. */
static inline size_t partition(uint64_t *a, size_t n, int le) {
    uint64_t pivot = a[0];
    size_t lt = 1;
    if (le) {
        for (size_t i = 1; i < n; i++) {
            uint64_t v = a[i];
            a[i] = a[lt];
            a[lt] = v;
            lt += v <= pivot;
        }
    } else {
        for (size_t i = 1; i < n; i++) {
            uint64_t v = a[i];
            a[i] = a[lt];
            a[lt] = v;
            lt += v < pivot;
        }
    }
    return lt;
}

/* Pattern-defeating-style quicksort (the scheme of Rust's sort_unstable): pivot from the
 * median of three (of three medians of three for long ranges), branchless partition,
 * equal keys split off when the pivot equals the one of an ancestor (`pred`, the key just
 * before the range, when `has_pred`), heapsort past `depth` levels, insertion sort for short
 * ranges. Recurses on the smaller side only. */
static inline void quick_sort(uint64_t *a, size_t n, int depth, int has_pred,
                              uint64_t pred) {
    while (n > 24) {
        if (depth-- == 0) {
            heap_sort(a, n);
            return;
        }
        size_t m = n / 2, piv;
        if (n >= 128) {
            size_t s = n / 8;
            piv = median3(a, median3(a, 0, s, 2 * s), median3(a, m - s, m, m + s),
                          median3(a, n - 1 - 2 * s, n - 1 - s, n - 1));
        } else {
            piv = median3(a, 0, m, n - 1);
        }
        swap_u64(&a[0], &a[piv]);
        if (has_pred && a[0] == pred) {
            /* Every key here is >= pred: the keys equal to it are done. */
            size_t eq = partition(a, n, 1);
            a += eq;
            n -= eq;
            continue;
        }
        size_t lt = partition(a, n, 0);
        swap_u64(&a[0], &a[lt - 1]);
        /* a[0..lt-1) < pivot = a[lt-1] <= a[lt..n) */
        uint64_t pivot = a[lt - 1];
        size_t left = lt - 1, right = n - lt;
        if (left < right) {
            quick_sort(a, left, depth, has_pred, pred);
            a += lt;
            n = right;
            has_pred = 1;
            pred = pivot;
        } else {
            quick_sort(a + lt, right, depth, 1, pivot);
            n = left;
        }
    }
    insertion_sort(a, n);
}

/* Sorts a[0..n) ascending. */
static inline void sort_u64(uint64_t *a, size_t n) {
    int depth = 0;
    for (size_t m = n; m > 1; m >>= 1) depth += 2;
    quick_sort(a, n, depth, 0, 0);
}

/* The first index of sorted `a` whose key is >= s (Rust's partition_point(|k| k < s)). */
static inline size_t lower_bound(const uint64_t *a, size_t n, uint64_t s) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (a[m] < s)
            lo = m + 1;
        else
            hi = m;
    }
    return lo;
}

/* The P - 1 splitters from a random sample of every rank's keys (collective), as
 * sampleb.rs's `splitters`. */
static inline void splitters(const uint64_t *keys, size_t n, uint64_t *spl) {
    uint64_t sample[OVERSAMPLE];
    uint64_t state = hash(11, (uint64_t)me);
    for (int s = 0; s < OVERSAMPLE; s++) {
        uint64_t r = rng_next(&state);
        sample[s] = n ? keys[r % n] : 0;
    }
    size_t total = (size_t)OVERSAMPLE * (size_t)nprocs;
    uint64_t *all = me == 0 ? xmalloc(total * sizeof *all) : NULL;
    MPI_Gather(sample, OVERSAMPLE, MPI_UINT64_T, all, OVERSAMPLE, MPI_UINT64_T, 0,
               MPI_COMM_WORLD);
    if (me == 0) {
        sort_u64(all, total);
        for (int i = 0; i + 1 < nprocs; i++) spl[i] = all[(size_t)(i + 1) * OVERSAMPLE];
        free(all);
    }
    MPI_Bcast(spl, nprocs - 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
}

#endif /* VOLLEY_APPS_MPI_SORT_KEYS_H */
