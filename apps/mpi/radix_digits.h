/* LSD radix sort's digits for the MPI peers of radix and radixb (radix.c, radixb.c): 8 bits
 * per pass, the stable counting sort by a digit, and each digit's first global index (as
 * volley-apps' sort.rs `destinations`). Include after harness.h. */
#ifndef VOLLEY_APPS_MPI_RADIX_DIGITS_H
#define VOLLEY_APPS_MPI_RADIX_DIGITS_H

#include <mpi.h>
#include <stdint.h>
#include <string.h>

#define BITS 8
#define PASSES (64 / BITS)
#define DIGITS (1 << BITS)

/* The digit of `k` that pass `shift` sorts by. */
static inline unsigned digit(uint64_t k, unsigned shift) {
    return (unsigned)(k >> shift) & (DIGITS - 1);
}

/* Stable counting sort of `keys` by digit into `out`; `counts` gets the keys of each digit. */
static inline void counting_sort(const uint64_t *restrict keys, uint64_t *restrict out, size_t n,
                          unsigned shift, uint64_t counts[DIGITS]) {
    size_t at[DIGITS];
    memset(counts, 0, DIGITS * sizeof counts[0]);
    for (size_t i = 0; i < n; i++) counts[digit(keys[i], shift)]++;
    size_t sum = 0;
    for (int d = 0; d < DIGITS; d++) {
        at[d] = sum;
        sum += counts[d];
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t k = keys[i];
        out[at[digit(k, shift)]++] = k;
    }
}

/* Global index of the first key of each digit that this rank sends: keys of smaller digits
 * on every rank, then keys of this digit on lower ranks (collective). */
static inline void destinations(const uint64_t counts[DIGITS], uint64_t first[DIGITS]) {
    uint64_t below[DIGITS], totals[DIGITS];
    MPI_Exscan(counts, below, DIGITS, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) memset(below, 0, sizeof below); /* MPI_Exscan leaves rank 0's undefined */
    MPI_Allreduce(counts, totals, DIGITS, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    uint64_t start = 0;
    for (int d = 0; d < DIGITS; d++) {
        first[d] = start + below[d];
        start += totals[d];
    }
}

#endif /* VOLLEY_APPS_MPI_RADIX_DIGITS_H */
