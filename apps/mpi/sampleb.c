/* Sample sort with MPI_Alltoallv: the message-passing peer of apps/src/bin/sampleb.rs.
 *
 * Usage: mpirun -n P sampleb [--size test|default|N] [--corrupt]
 *
 * The same problem and algorithm as the volley program: N keys per rank (16384 for `test`,
 * 2^24 by default), key i of the job (rank r holds keys r*N .. r*N+N-1) is hash(7, i), the
 * SplitMix64-based hash of volley-apps' lib.rs, so the input is bit-for-bit the one
 * sampleb.rs sorts. The timed phase:
 *
 * 1. splitters exactly as sampleb.rs's `splitters`: each rank draws OVERSAMPLE = 256 of its
 *    (unsorted) keys at indices from the generator seeded with hash(11, rank), rank 0 gathers
 *    (MPI_Gather) and sorts them and takes every 256th from the 256th on as the P - 1
 *    splitters, MPI_Bcast sends them to all, so both programs use the same splitters;
 * 2. each rank sorts its keys (a pattern-defeating quicksort with a branchless partition,
 *    the scheme of Rust's sort_unstable, within ~1.3x of its speed on these keys), so
 *    the keys bound for rank r are one run, from the first key >= splitter r-1 to the first
 *    key >= splitter r (binary searches, as sampleb.rs's `run_bounds`);
 * 3. MPI_Alltoall of the run lengths, then one MPI_Alltoallv of the runs: every rank
 *    receives P sorted runs in source-rank order, the same keys in the same order that
 *    sampleb.rs's bulk stores leave in its part of the spread array;
 * 4. the P runs are merged (pairwise, ceil(log2 P) passes: O(n log P), like the run-detecting
 *    stable sort sampleb.rs uses for this).
 *
 * Timed as volley-apps' `Ctx::timed`: MPI_Barrier, steps 1-4, MPI_Barrier, the slowest
 * rank's seconds (MPI_Reduce MAX). The check is check_sorted's: keys ascending on every
 * rank, each rank's last key <= the next non-empty rank's first, and the multiset checksum
 * (sum and xor over ranks of multiset_checksum) equal to the input's. Rank 0 prints one line,
 * volley-app {"program":"sampleb-mpi","strategy":"mpi",...}; the exit status is 1 if any
 * rank's check failed.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "sampleb-mpi"
/* With the input and check of a distributed sort. */
#define HARNESS_SORTS
/* Samples each rank contributes to the choice of splitters. */
#define OVERSAMPLE 256

/* The volley-apps harness, shared with radixb.c and cannon.c. */
#include "harness.h"

/* ---- sampleb ---- */

static inline void swap_u64(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(uint64_t *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        size_t j = i;
        for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
        a[j] = v;
    }
}

static void sift_down(uint64_t *a, size_t n, size_t i) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        swap_u64(&a[i], &a[c]);
        i = c;
    }
}

static void heap_sort(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(a, n, i);
    for (size_t end = n; end-- > 1;) {
        swap_u64(&a[0], &a[end]);
        sift_down(a, end, 0);
    }
}

/* The index of the median of a[i], a[j], a[k]. */
static size_t median3(const uint64_t *a, size_t i, size_t j, size_t k) {
    if (a[i] < a[j]) return a[j] < a[k] ? j : a[i] < a[k] ? k : i;
    return a[i] < a[k] ? i : a[j] < a[k] ? k : j;
}

/* Branchless Lomuto partition of a[1..n) around the pivot a[0]: keys for which the test
 * holds (key < pivot, or key <= pivot when `le`) first; returns how many, plus one. */
static size_t partition(uint64_t *a, size_t n, int le) {
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
static void quick_sort(uint64_t *a, size_t n, int depth, int has_pred, uint64_t pred) {
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
static void sort_u64(uint64_t *a, size_t n) {
    int depth = 0;
    for (size_t m = n; m > 1; m >>= 1) depth += 2;
    quick_sort(a, n, depth, 0, 0);
}

/* The first index of sorted `a` whose key is >= s (Rust's partition_point(|k| k < s)). */
static size_t lower_bound(const uint64_t *a, size_t n, uint64_t s) {
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
static void splitters(const uint64_t *keys, size_t n, uint64_t *spl) {
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

/* Merges the `runs` sorted runs of `src` (run r is bounds[r] .. bounds[r+1]) pairwise until
 * one is left, using `tmp` (as long as `src`); returns the buffer that holds the result.
 * `bounds` is overwritten. The merge loop is branchless (random keys would mispredict). */
static uint64_t *merge_runs(uint64_t *src, uint64_t *tmp, size_t *bounds, size_t runs) {
    while (runs > 1) {
        size_t out = 0;
        for (size_t r = 0; r < runs; r += 2) {
            size_t lo = bounds[r], mid = bounds[r + 1];
            size_t hi = r + 2 <= runs ? bounds[r + 2] : mid;
            const uint64_t *x = src + lo, *xe = src + mid, *y = src + mid, *ye = src + hi;
            uint64_t *d = tmp + lo;
            while (x < xe && y < ye) {
                uint64_t u = *x, v = *y;
                int take_y = v < u;
                *d++ = take_y ? v : u;
                y += take_y;
                x += !take_y;
            }
            memcpy(d, x, (size_t)(xe - x) * sizeof *d);
            d += xe - x;
            memcpy(d, y, (size_t)(ye - y) * sizeof *d);
            bounds[out++] = lo;
        }
        bounds[out] = bounds[runs];
        runs = out;
        uint64_t *t = src;
        src = tmp;
        tmp = t;
    }
    return src;
}

int main(int argc, char **argv) {
    struct size size;
    int corrupt;
    harness_init(&argc, &argv, &size, &corrupt);

    uint64_t per64 = pick(size, 16384, (uint64_t)1 << 24);
    if (per64 > INT_MAX) die("--size: at most 2^31-1 keys per rank (MPI counts are ints)");
    size_t per = (size_t)per64, p = (size_t)nprocs;
    uint64_t *keys = xmalloc(per * sizeof *keys);
    uint64_t input[2];
    input_keys(keys, per, input);
    uint64_t *spl = xmalloc(p * sizeof *spl);
    size_t *bounds = xmalloc((p + 1) * sizeof *bounds);
    int *scount = xmalloc(p * sizeof *scount), *sdispl = xmalloc(p * sizeof *sdispl);
    int *rcount = xmalloc(p * sizeof *rcount), *rdispl = xmalloc(p * sizeof *rdispl);

    double t0 = timed_start();
    splitters(keys, per, spl);
    sort_u64(keys, per);
    /* Rank r's run: from splitter r-1 (inclusive) to splitter r (exclusive). */
    bounds[0] = 0;
    for (size_t r = 1; r < p; r++) bounds[r] = lower_bound(keys, per, spl[r - 1]);
    bounds[p] = per;
    for (size_t r = 0; r < p; r++) {
        sdispl[r] = (int)bounds[r];
        scount[r] = (int)(bounds[r + 1] - bounds[r]);
    }
    MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
    size_t total = 0;
    for (size_t r = 0; r < p; r++) {
        bounds[r] = total;
        rdispl[r] = (int)total;
        total += (size_t)rcount[r];
        if (total > INT_MAX) die("more than 2^31-1 keys for one rank (MPI counts are ints)");
    }
    bounds[p] = total;
    uint64_t *got = xmalloc(total * sizeof *got);
    MPI_Alltoallv(keys, scount, sdispl, MPI_UINT64_T, got, rcount, rdispl, MPI_UINT64_T,
                  MPI_COMM_WORLD);
    /* P sorted runs, one per source: merge them. */
    uint64_t *tmp = xmalloc(total * sizeof *tmp);
    uint64_t *mine = merge_runs(got, tmp, bounds, p);
    free(mine == got ? tmp : got);
    double seconds = timed_end(t0);

    if (corrupt && total > 1) swap_u64(&mine[0], &mine[1]);
    char err[256];
    const char *error = check_sorted(mine, total, input, err, sizeof err);
    char problem[64];
    snprintf(problem, sizeof problem, "%llu keys", (unsigned long long)(per64 * p));
    free(keys);
    free(mine);
    free(spl);
    free(bounds);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    report(problem, seconds, error);
    return 0;
}
