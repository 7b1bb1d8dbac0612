/* Open MPI collectives, measured as a peer of volley's own (volley-cli/src/bench/mpi_peer.rs).
 *
 * Usage: mpi_coll ITERS_SCALE REPS
 *
 * For each operation: iters/10 warm-up calls, then per repetition a barrier and `iters`
 * back-to-back calls timed with MPI_Wtime; the repetition's figure is the largest per-rank
 * mean time per call, the reported figure the median over repetitions. Rank 0 prints one
 * line of JSON: {"ranks": P, "mpi_barrier_ns": ..., ...}.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG_DOUBLES 131072 /* 1 MiB of doubles */
#define A2A_BIG 65536      /* bytes per pair */

static int rank, size;
static uint64_t word_in, word_out;
static double *big_in, *big_out;
static char *a2a_small_in, *a2a_small_out, *a2a_big_in, *a2a_big_out;

static void op_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

static void op_bcast_8B(void) { MPI_Bcast(&word_in, 8, MPI_BYTE, 0, MPI_COMM_WORLD); }

static void op_allreduce_8B(void) {
    MPI_Allreduce(&word_in, &word_out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
}

static void op_allreduce_1MiB(void) {
    MPI_Allreduce(big_in, big_out, BIG_DOUBLES, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static void op_alltoall_8B(void) {
    MPI_Alltoall(a2a_small_in, 8, MPI_BYTE, a2a_small_out, 8, MPI_BYTE, MPI_COMM_WORLD);
}

static void op_alltoall_64KiB(void) {
    MPI_Alltoall(a2a_big_in, A2A_BIG, MPI_BYTE, a2a_big_out, A2A_BIG, MPI_BYTE, MPI_COMM_WORLD);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what) {
    fprintf(stderr, "mpi_coll: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (p == NULL) fail("out of memory");
    return p;
}

/* Median over `reps` repetitions of the slowest rank's mean ns per call (meaningful on rank 0). */
static double measure(void (*op)(void), long base, double scale, int reps) {
    long iters = (long)(base * scale);
    if (iters < 3) iters = 3;
    for (long i = 0; i < iters / 10; i++) op();
    double *samples = xmalloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++) op();
        double mean = (MPI_Wtime() - t0) * 1e9 / (double)iters, max = 0.0;
        MPI_Reduce(&mean, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        samples[r] = max;
    }
    qsort(samples, (size_t)reps, sizeof(double), cmp_double);
    double median = reps % 2 ? samples[reps / 2] : (samples[reps / 2 - 1] + samples[reps / 2]) / 2.0;
    free(samples);
    return median;
}

/* One call of each checked operation gives the expected result. */
static void check(void) {
    uint64_t p = (uint64_t)size;
    word_in = (uint64_t)rank + 1;
    op_allreduce_8B();
    if (word_out != p * (p + 1) / 2) fail("8-byte allreduce: wrong sum");

    word_in = rank == 0 ? 0x5eedf00dULL : 0;
    op_bcast_8B();
    if (word_in != 0x5eedf00dULL) fail("8-byte bcast: wrong value");

    for (int i = 0; i < size; i++) {
        uint64_t v = (uint64_t)rank * 1000 + (uint64_t)i; /* from rank to rank i */
        memcpy(a2a_small_in + 8 * i, &v, 8);
    }
    op_alltoall_8B();
    for (int i = 0; i < size; i++) {
        uint64_t v;
        memcpy(&v, a2a_small_out + 8 * i, 8);
        if (v != (uint64_t)i * 1000 + (uint64_t)rank) fail("8-byte alltoall: wrong block");
    }

    for (int i = 0; i < BIG_DOUBLES; i++) big_in[i] = (double)(rank + 1);
    op_allreduce_1MiB();
    for (int i = 0; i < BIG_DOUBLES; i++)
        if (big_out[i] != (double)(p * (p + 1) / 2)) fail("1 MiB allreduce: wrong sum");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *end1 = NULL, *end2 = NULL;
    double scale = argc == 3 ? strtod(argv[1], &end1) : 0.0;
    long reps = argc == 3 ? strtol(argv[2], &end2, 10) : 0;
    if (argc != 3 || *end1 != '\0' || *end2 != '\0' || !(scale > 0.0) || reps < 1 || reps > 100000)
        fail("usage: mpi_coll ITERS_SCALE REPS (scale > 0, reps >= 1)");

    size_t n = (size_t)size;
    big_in = xmalloc(sizeof(double) * BIG_DOUBLES);
    big_out = xmalloc(sizeof(double) * BIG_DOUBLES);
    a2a_small_in = xmalloc(8 * n);
    a2a_small_out = xmalloc(8 * n);
    a2a_big_in = xmalloc(A2A_BIG * n);
    a2a_big_out = xmalloc(A2A_BIG * n);
    memset(a2a_big_in, rank, A2A_BIG * n);
    check();

    int r = (int)reps;
    double barrier = measure(op_barrier, 20000, scale, r);
    double bcast = measure(op_bcast_8B, 20000, scale, r);
    double ar8 = measure(op_allreduce_8B, 20000, scale, r);
    double ar1m = measure(op_allreduce_1MiB, 200, scale, r);
    double a2a8 = measure(op_alltoall_8B, 20000, scale, r);
    double a2a64k = measure(op_alltoall_64KiB, 200, scale, r);

    if (rank == 0) {
        printf("{\"ranks\": %d, \"mpi_barrier_ns\": %.1f, \"mpi_bcast_8B_ns\": %.1f, "
               "\"mpi_allreduce_8B_ns\": %.1f, \"mpi_allreduce_1MiB_ns\": %.1f, "
               "\"mpi_alltoall_8B_ns\": %.1f, \"mpi_alltoall_64KiB_ns\": %.1f}\n",
               size, barrier, bcast, ar8, ar1m, a2a8, a2a64k);
        fflush(stdout);
    }
    free(big_in);
    free(big_out);
    free(a2a_small_in);
    free(a2a_small_out);
    free(a2a_big_in);
    free(a2a_big_out);
    MPI_Finalize();
    return 0;
}
