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

/* The volley-apps harness, shared with the other MPI peers, and the sample sorts' sorting. */
#include "harness.h"
#include "sort_keys.h"

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
