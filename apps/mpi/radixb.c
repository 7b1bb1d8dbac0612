/* Radix sort with MPI_Alltoallv: the message-passing peer of apps/src/bin/radixb.rs.
 *
 * Usage: mpirun -n P radixb [--size test|default|N] [--corrupt]
 *
 * The same problem and algorithm as the volley program: N keys per rank (16384 for `test`,
 * 2^23 by default), key i of the job (rank r holds keys r*N .. r*N+N-1) is hash(7, i), the
 * SplitMix64-based hash of volley-apps' lib.rs, so the input is bit-for-bit the one radixb.rs
 * sorts. LSD radix sort, 8 bits per pass, 8 passes; each pass:
 *
 * 1. a stable counting sort of this rank's keys by the digit, so the keys of one digit lie
 *    together, and the 256 digit counts;
 * 2. MPI_Exscan (keys of each digit on lower ranks) and MPI_Allreduce (keys of each digit on
 *    all ranks) of the counts: the global index of this rank's first key of each digit in the
 *    blocked N-keys-per-rank array, exactly as radixb.rs's `destinations`;
 * 3. each digit's run is cut at the rank boundaries of that array (radixb.rs's `store_run`);
 *    the pieces for one destination are consecutive in the digit-sorted keys, so one
 *    MPI_Alltoallv moves them all (after an MPI_Alltoall of the counts);
 * 4. what a rank receives is, per source in rank order, its pieces in digit order; a stable
 *    counting sort by the digit puts them in (digit, source rank, order) order, which is the
 *    order of the global array, so every rank ends the pass with exactly the keys (and the
 *    order) that radixb.rs's bulk stores leave in its part of the spread array.
 *
 * Timed as volley-apps' `Ctx::timed`: MPI_Barrier, the 8 passes, MPI_Barrier, the slowest
 * rank's seconds (MPI_Reduce MAX). The check is check_sorted's: keys ascending on every
 * rank, each rank's last key <= the next non-empty rank's first, and the multiset checksum
 * (sum and xor over ranks of multiset_checksum) equal to the input's. Rank 0 prints one line,
 * volley-app {"program":"radixb-mpi","strategy":"mpi",...}; the exit status is 1 if any rank's
 * check failed.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "radixb-mpi"
/* With the input and check of a distributed sort. */
#define HARNESS_SORTS

/* The volley-apps harness, shared with the other MPI peers, and the radix sorts' digits. */
#include "harness.h"
#include "radix_digits.h"

int main(int argc, char **argv) {
    struct size size;
    int corrupt;
    harness_init(&argc, &argv, &size, &corrupt);

    uint64_t per64 = pick(size, 16384, (uint64_t)1 << 23);
    if (per64 > INT_MAX) die("--size: at most 2^31-1 keys per rank (MPI counts are ints)");
    size_t per = (size_t)per64, p = (size_t)nprocs;
    uint64_t *keys = xmalloc(per * sizeof *keys);
    uint64_t *by_digit = xmalloc(per * sizeof *by_digit);
    uint64_t *got = xmalloc(per * sizeof *got);
    uint64_t input[2];
    input_keys(keys, per, input);
    int *scount = xmalloc(p * sizeof *scount), *sdispl = xmalloc(p * sizeof *sdispl);
    int *rcount = xmalloc(p * sizeof *rcount), *rdispl = xmalloc(p * sizeof *rdispl);
    uint64_t counts[DIGITS], first[DIGITS], ignored[DIGITS];

    double t0 = timed_start();
    for (unsigned pass = 0; pass < PASSES; pass++) {
        unsigned shift = pass * BITS;
        counting_sort(keys, by_digit, per, shift, counts);
        destinations(counts, first);
        /* Cut every digit's run at the rank boundaries of the blocked global array. */
        memset(scount, 0, p * sizeof *scount);
        for (int d = 0; d < DIGITS; d++) {
            uint64_t at = first[d], left = counts[d];
            while (left > 0) {
                uint64_t rank = at / per, local = at % per;
                uint64_t n = left < per - local ? left : per - local;
                scount[rank] += (int)n;
                at += n;
                left -= n;
            }
        }
        /* The pieces for each destination are consecutive in by_digit, in rank order. */
        int s = 0;
        for (size_t r = 0; r < p; r++) {
            sdispl[r] = s;
            s += scount[r];
        }
        MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
        int total = 0;
        for (size_t r = 0; r < p; r++) {
            rdispl[r] = total;
            total += rcount[r];
        }
        if ((size_t)total != per) die("a pass received the wrong number of keys");
        MPI_Alltoallv(by_digit, scount, sdispl, MPI_UINT64_T, got, rcount, rdispl,
                      MPI_UINT64_T, MPI_COMM_WORLD);
        /* (source, digit) order to (digit, source) order: this rank's part of the array. */
        counting_sort(got, keys, per, shift, ignored);
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
    free(keys);
    free(by_digit);
    free(got);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    report(problem, seconds, error);
    return 0;
}
