/* Radix sort with one MPI_Put per key: the message-passing peer of apps/src/bin/radix.rs.
 *
 * Usage: mpirun -n P radix [--size test|default|N] [--corrupt]
 *
 * The same problem and algorithm as the volley program: N keys per rank (4096 for `test`,
 * 2^20 by default), key i of the job is hash(7, i), so the input is bit-for-bit the one
 * radix.rs sorts. LSD radix sort, 8 bits per pass, 8 passes; each pass counts the keys of
 * each digit, finds each digit's first global index (MPI_Exscan and MPI_Allreduce of the
 * counts, as radix.rs's `destinations`), and moves every key on its own to its place in the
 * blocked N-keys-per-rank array: one MPI_Put of 8 bytes per key into the owner's window,
 * the epoch closed by MPI_Win_fence (radix.rs's one `store` per key and `all_store_sync`).
 * MPI has no one-way remote store with a counter at the target; one-sided puts in a fence
 * epoch are its nearest form of the fine-grained pattern. After the fence a rank's window
 * holds its part of the permuted array, which the next pass sorts.
 *
 * Timed, checked and reported as radixb.c (harness.h): rank 0 prints
 * volley-app {"program":"radix-mpi","strategy":"mpi",...}.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "radix-mpi"
/* With the input and check of a distributed sort. */
#define HARNESS_SORTS

/* The volley-apps harness, shared with the other MPI peers, and the radix sorts' digits. */
#include "harness.h"
#include "radix_digits.h"

int main(int argc, char **argv) {
    struct size size;
    int corrupt;
    harness_init(&argc, &argv, &size, &corrupt);

    uint64_t per64 = pick(size, 4096, (uint64_t)1 << 20);
    size_t per = (size_t)per64, p = (size_t)nprocs;
    uint64_t *keys = xmalloc(per * sizeof *keys);
    uint64_t input[2];
    input_keys(keys, per, input);
    /* The window: this rank's part of the array the keys are permuted into. */
    uint64_t *part;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(per * sizeof *part), sizeof *part, MPI_INFO_NULL,
                     MPI_COMM_WORLD, &part, &win);
    uint64_t counts[DIGITS], next[DIGITS];

    double t0 = timed_start();
    for (unsigned pass = 0; pass < PASSES; pass++) {
        unsigned shift = pass * BITS;
        memset(counts, 0, sizeof counts);
        for (size_t i = 0; i < per; i++) counts[digit(keys[i], shift)]++;
        destinations(counts, next);
        MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
        for (size_t i = 0; i < per; i++) {
            uint64_t at = next[digit(keys[i], shift)]++;
            MPI_Put(&keys[i], 1, MPI_UINT64_T, (int)(at / per), (MPI_Aint)(at % per), 1,
                    MPI_UINT64_T, win);
        }
        /* Every put of the pass is in every window; `keys` may be overwritten. */
        MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
        memcpy(keys, part, per * sizeof *keys);
    }
    double seconds = timed_end(t0);

    if (corrupt && per > 1) {
        uint64_t t = keys[0];
        keys[0] = keys[1];
        keys[1] = t;
    }
    char err[256];
    const char *error = check_sorted(keys, per, input, err, sizeof err);
    char problem[64];
    snprintf(problem, sizeof problem, "%llu keys", (unsigned long long)(per64 * p));
    MPI_Win_free(&win);
    free(keys);
    report(problem, seconds, error);
    return 0;
}
