/* Open MPI's send/receive round trip, measured as a peer of volley's tag-matching layer
 * (volley-cli/src/bench/msg.rs).
 *
 * Usage: mpi_pingpong ITERS REPS
 *
 * Ranks 0 and 1 bounce 8 bytes with MPI_Send and MPI_Recv (named source and tag): ITERS/10
 * warm-up round trips, then REPS timed blocks of ITERS. Rank 0 checks every reply's content
 * and prints one line of JSON: {"mpi_sendrecv_rtt_ns": median over the blocks}.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -n 2 mpi_pingpong ITERS REPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long iters = atol(argv[1]), reps = atol(argv[2]);
    if (iters < 1 || reps < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    double *samples = malloc(sizeof(double) * (size_t)reps);
    if (samples == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    uint64_t word = 0;
    int peer = 1 - rank;
    for (long r = -1; r < reps; r++) {
        long n = r < 0 ? iters / 10 + 1 : iters;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            if (rank == 0) {
                uint64_t out = (uint64_t)i * 3 + 1;
                MPI_Send(&out, 8, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
                MPI_Recv(&word, 8, MPI_BYTE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (word != out + 1) {
                    fprintf(stderr, "mpi_pingpong: a reply differs\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                MPI_Recv(&word, 8, MPI_BYTE, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                word += 1;
                MPI_Send(&word, 8, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
            }
        }
        double ns = (MPI_Wtime() - t0) * 1e9 / (double)n;
        if (r >= 0) samples[r] = ns;
    }
    if (rank == 0) {
        qsort(samples, (size_t)reps, sizeof(double), cmp_double);
        double med = reps % 2 ? samples[reps / 2] : (samples[reps / 2 - 1] + samples[reps / 2]) / 2;
        printf("{\"mpi_sendrecv_rtt_ns\": %.1f}\n", med);
    }
    free(samples);
    MPI_Finalize();
    return 0;
}
