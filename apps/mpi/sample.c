/* Sample sort with one remote atomic slot and put per key: the message-passing peer of
 * apps/src/bin/sample.rs.
 *
 * Usage: mpirun -n P sample [--size test|default|N] [--corrupt]
 *
 * The same problem and algorithm as the volley program: N keys per rank (16384 for `test`,
 * 2^23 by default), key i of the job is hash(7, i), the same splitters (sort_keys.h), and
 * every key moved on its own to the rank that owns it, appended to that rank's bucket of
 * 2N + 1024 keys. sample.rs's `push` is one one-way Active Message per key that takes the
 * slot at the owner; MPI has no remote append, so here a key takes its slot with
 * MPI_Fetch_and_op on the owner's count (completed by MPI_Win_flush: a round trip) and is
 * then written there with MPI_Put, in one passive-target epoch (MPI_Win_lock_all) closed by
 * MPI_Win_flush_all and a barrier. A bucket that would overflow makes every rank push again
 * into buckets twice as large, as sample.rs does. Each rank then sorts its bucket.
 *
 * Timed, checked and reported as sampleb.c (harness.h): rank 0 prints
 * volley-app {"program":"sample-mpi","strategy":"mpi",...}.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "sample-mpi"
/* With the input and check of a distributed sort. */
#define HARNESS_SORTS

/* The volley-apps harness, shared with the other MPI peers, and the sample sorts' sorting. */
#include "harness.h"
#include "sort_keys.h"

/* The rank that owns key `k`: the number of splitters at or below it. */
static size_t owner(const uint64_t *spl, size_t n, uint64_t k) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (spl[m] <= k)
            lo = m + 1;
        else
            hi = m;
    }
    return lo;
}

/* Pushes every key onto its owner's bucket of `cap` keys (collective). Returns this rank's
 * count of keys pushed to it (which may exceed `cap`: the pushes past it were dropped). */
static uint64_t push_all(const uint64_t *keys, size_t per, const uint64_t *spl, uint64_t cap,
                         MPI_Win bwin, uint64_t *count, MPI_Win cwin) {
    const uint64_t one = 1;
    *count = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, cwin);
    MPI_Win_lock_all(0, bwin);
    for (size_t i = 0; i < per; i++) {
        int r = (int)owner(spl, (size_t)nprocs - 1, keys[i]);
        uint64_t slot;
        MPI_Fetch_and_op(&one, &slot, MPI_UINT64_T, r, 0, MPI_SUM, cwin);
        MPI_Win_flush(r, cwin);
        if (slot < cap)
            MPI_Put(&keys[i], 1, MPI_UINT64_T, r, (MPI_Aint)slot, 1, MPI_UINT64_T, bwin);
    }
    MPI_Win_flush_all(bwin);
    MPI_Win_unlock_all(bwin);
    MPI_Win_unlock_all(cwin);
    /* Every rank's pushes are complete at their targets. */
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t mine;
    MPI_Win_lock(MPI_LOCK_SHARED, me, 0, cwin);
    mine = *count;
    MPI_Win_unlock(me, cwin);
    return mine;
}

int main(int argc, char **argv) {
    struct size size;
    int corrupt;
    harness_init(&argc, &argv, &size, &corrupt);

    uint64_t per64 = pick(size, 16384, (uint64_t)1 << 23);
    size_t per = (size_t)per64, p = (size_t)nprocs;
    uint64_t *keys = xmalloc(per * sizeof *keys);
    uint64_t input[2];
    input_keys(keys, per, input);
    uint64_t *spl = xmalloc(p * sizeof *spl);
    uint64_t *count, *bucket;
    MPI_Win cwin, bwin;
    MPI_Win_allocate(sizeof *count, sizeof *count, MPI_INFO_NULL, MPI_COMM_WORLD, &count,
                     &cwin);
    uint64_t cap = 2 * per64 + 1024;
    MPI_Win_allocate((MPI_Aint)(cap * sizeof *bucket), sizeof *bucket, MPI_INFO_NULL,
                     MPI_COMM_WORLD, &bucket, &bwin);

    double t0 = timed_start();
    splitters(keys, per, spl);
    uint64_t got;
    for (;;) {
        got = push_all(keys, per, spl, cap, bwin, count, cwin);
        uint64_t over = got > cap, any;
        MPI_Allreduce(&over, &any, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (!any) break;
        cap *= 2;
        if (me == 0) {
            fprintf(stderr,
                    "sample-mpi: a bucket overflowed; pushing again into buckets of %llu\n",
                    (unsigned long long)cap);
        }
        MPI_Win_free(&bwin);
        MPI_Win_allocate((MPI_Aint)(cap * sizeof *bucket), sizeof *bucket, MPI_INFO_NULL,
                         MPI_COMM_WORLD, &bucket, &bwin);
    }
    uint64_t *mine = xmalloc(got * sizeof *mine);
    MPI_Win_lock(MPI_LOCK_SHARED, me, 0, bwin);
    memcpy(mine, bucket, got * sizeof *mine);
    MPI_Win_unlock(me, bwin);
    sort_u64(mine, got);
    double seconds = timed_end(t0);

    if (corrupt && got > 1) swap_u64(&mine[0], &mine[1]);
    char err[256];
    const char *error = check_sorted(mine, got, input, err, sizeof err);
    char problem[64];
    snprintf(problem, sizeof problem, "%llu keys", (unsigned long long)(per64 * p));
    MPI_Win_free(&bwin);
    MPI_Win_free(&cwin);
    free(keys);
    free(mine);
    free(spl);
    report(problem, seconds, error);
    return 0;
}
