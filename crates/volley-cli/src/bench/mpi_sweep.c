/* Open MPI's latency and bandwidth sweeps, measured as a peer of volley's (bench/peers.rs), in
 * the manner of the OSU micro-benchmarks' osu_latency and osu_bw.
 *
 * Usage: mpi_sweep SCALE
 *
 * Sizes from 8 B to 16 MiB by powers of two. Latency: ranks 0 and 1 bounce SIZE bytes with
 * MPI_Send and MPI_Recv; half the round trip. Bandwidth: rank 0 posts a window of 64
 * MPI_Isend of SIZE bytes, rank 1 as many MPI_Irecv, both wait, rank 1 answers with 4 bytes;
 * bytes over time. Iteration counts shrink with the size and are multiplied by SCALE (at least
 * 2). Rank 0 prints one line of JSON:
 * {"latency": [{"size": S, "latency_us": X}...], "bandwidth": [{"size": S, "mb_per_s": Y}...]}
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_LOG 3
#define MAX_LOG 24
#define WINDOW 64

static long iters_for(double scale, long base, long size) {
    /* Fewer iterations for long messages: about the same bytes per size above 8 KiB. */
    long n = size <= 8192 ? base : base * 8192 / size;
    n = (long)((double)n * scale);
    return n < 2 ? 2 : n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc != 2 || nranks != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -n 2 mpi_sweep SCALE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double scale = atof(argv[1]);
    if (!(scale > 0.0)) MPI_Abort(MPI_COMM_WORLD, 2);
    size_t max = (size_t)1 << MAX_LOG;
    char *buf = malloc(max);
    char *win = malloc(max);
    if (buf == NULL || win == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    memset(buf, 1, max);
    memset(win, 2, max);
    int peer = 1 - rank;
    MPI_Request reqs[WINDOW];
    int ack = 0;

    double lat[MAX_LOG + 1], bw[MAX_LOG + 1];
    for (int lg = MIN_LOG; lg <= MAX_LOG; lg++) {
        long size = 1L << lg;
        long n = iters_for(scale, 10000, size);
        for (int timed = 0; timed < 2; timed++) {
            long k = timed ? n : n / 10 + 1;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < k; i++) {
                if (rank == 0) {
                    MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                }
            }
            lat[lg] = (MPI_Wtime() - t0) * 1e6 / (2.0 * (double)k);
        }
        /* A window of 64 long messages of the largest sizes is 1 GiB: fewer in flight there. */
        long w = size <= (1L << 18) ? WINDOW : WINDOW >> (lg - 18);
        if (w < 1) w = 1;
        long m = iters_for(scale, 200, size);
        for (int timed = 0; timed < 2; timed++) {
            long k = timed ? m : m / 10 + 1;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < k; i++) {
                for (long j = 0; j < w; j++) {
                    /* One buffer per side, as osu_bw: the figure is the transport's, not
                     * the memory's. */
                    if (rank == 0)
                        MPI_Isend(win, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[j]);
                    else
                        MPI_Irecv(win, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[j]);
                }
                MPI_Waitall((int)w, reqs, MPI_STATUSES_IGNORE);
                if (rank == 0)
                    MPI_Recv(&ack, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Send(&ack, 1, MPI_INT, peer, 3, MPI_COMM_WORLD);
            }
            double t = MPI_Wtime() - t0;
            bw[lg] = (double)size * (double)w * (double)k / t / 1e6;
        }
    }
    if (rank == 0) {
        printf("{\"latency\": [");
        for (int lg = MIN_LOG; lg <= MAX_LOG; lg++)
            printf("%s{\"size\": %ld, \"latency_us\": %.4f}", lg > MIN_LOG ? ", " : "", 1L << lg,
                   lat[lg]);
        printf("], \"bandwidth\": [");
        for (int lg = MIN_LOG; lg <= MAX_LOG; lg++)
            printf("%s{\"size\": %ld, \"mb_per_s\": %.3f}", lg > MIN_LOG ? ", " : "", 1L << lg,
                   bw[lg]);
        printf("]}\n");
        fflush(stdout);
    }
    free(buf);
    free(win);
    MPI_Finalize();
    return 0;
}
