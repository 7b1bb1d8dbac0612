/* Cannon's matrix multiply with MPI_Sendrecv_replace: the message-passing peer of
 * apps/src/bin/cannon.rs.
 *
 * Usage: mpirun -n P cannon [--size test|default|N] [--corrupt]
 *
 * The same problem and algorithm as the volley program: C = A.B for N x N matrices of
 * doubles (N = 100 for `test`, 2560 by default) on a q x q grid of ranks (P = q^2, rank r at
 * row r / q, column r mod q), each rank holding one b x b block of A, B and C (b = ceil(N/q),
 * edge blocks padded with zeros). Element (r, c) of A is unit(hash(21, r*N + c)), of B
 * unit(hash(22, r*N + c)), with volley-apps' SplitMix64-based hash, so the matrices are
 * bit-for-bit cannon.rs's. The timed phase:
 *
 * 1. skew: rank (i, j) sends its A(i, j) to (i, j-i) and its B(i, j) to (i-j, j)
 *    (MPI_Sendrecv_replace, receiving from (i, j+i) and (i+j, j)), so that it then holds
 *    A(i, i+j) and B(i+j, j) (indices mod q);
 * 2. q steps of C(i, j) += A.B of the blocks held (the same panelled i-k-j loops as
 *    cannon.rs's multiply_add), then every A block moves one rank left and every B block one
 *    rank up, each with one MPI_Sendrecv_replace (after the last product nothing moves).
 *
 * Unlike cannon.rs, whose puts of the next blocks travel while the product runs, a step's
 * shifts here start after its product (MPI_Sendrecv_replace blocks), and no barrier ends a
 * step (the receives order the steps).
 *
 * Timed as volley-apps' `Ctx::timed`: MPI_Barrier, steps 1-2, MPI_Barrier, the slowest
 * rank's seconds (MPI_Reduce MAX). The check is cannon.rs's: C.x = A.(B.x) for the vector
 * x_r = unit(hash(23, r)), each product computed from the blocks as they were generated and
 * summed with MPI_Allreduce, to a relative 1e-9. P must be a perfect square (1, 4, 9, ...);
 * other counts exit with status 2. Rank 0 prints one line,
 * volley-app {"program":"cannon-mpi","strategy":"mpi",...}; the exit status is 1 if the check
 * failed.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "cannon-mpi"
/* Rows of B (a panel) each pass of the block product keeps in cache. */
#define PANEL 32

/* The volley-apps harness, shared with radixb.c and sampleb.c. */
#include "harness.h"

/* ---- cannon ---- */

/* The grid and the blocks. */
struct grid {
    size_t n; /* matrix order */
    size_t q; /* ranks per grid row and column */
    size_t b; /* block order */
};

/* The rank at grid position (i, j), indices taken mod q. */
static int grid_rank(const struct grid *g, size_t i, size_t j) {
    return (int)((i % g->q) * g->q + j % g->q);
}

/* A uniform value in [-1, 1) from 64 random bits (cannon.rs's `unit`). */
static double unit(uint64_t h) {
    return (double)(h >> 11) / (double)((uint64_t)1 << 52) - 1.0;
}

/* Block (bi, bj) of the matrix with elements unit(hash(seed, r*n + c)), zero outside n x n. */
static double *make_block(const struct grid *g, size_t bi, size_t bj, uint64_t seed) {
    size_t b = g->b;
    double *out = xmalloc(b * b * sizeof *out);
    for (size_t ii = 0; ii < b; ii++) {
        size_t r = bi * b + ii;
        for (size_t jj = 0; jj < b; jj++) {
            size_t c = bj * b + jj;
            out[ii * b + jj] = r < g->n && c < g->n ? unit(hash(seed, (uint64_t)(r * g->n + c)))
                                                    : 0.0;
        }
    }
    return out;
}

/* c += a.b for m x m row-major blocks: i-k-j loops (the inner loop streams a row of b into a
 * row of c), over panels of PANEL rows of b so that the panel stays in cache for every row of
 * c, as cannon.rs's multiply_add. The inner loop is unrolled by four so that -O2's SLP
 * vectorizer makes the same two-doubles-wide SSE2 code rustc's loop vectorizer does. */
static void multiply_add(const double *restrict a, const double *restrict b, double *restrict c,
                         size_t m) {
    for (size_t k0 = 0; k0 < m; k0 += PANEL) {
        size_t k1 = k0 + PANEL < m ? k0 + PANEL : m;
        for (size_t i = 0; i < m; i++) {
            double *restrict ci = c + i * m;
            const double *ai = a + i * m;
            for (size_t k = k0; k < k1; k++) {
                double aik = ai[k];
                const double *restrict bk = b + k * m;
                size_t j = 0;
                for (; j + 4 <= m; j += 4) {
                    ci[j] += aik * bk[j];
                    ci[j + 1] += aik * bk[j + 1];
                    ci[j + 2] += aik * bk[j + 2];
                    ci[j + 3] += aik * bk[j + 3];
                }
                for (; j < m; j++) ci[j] += aik * bk[j];
            }
        }
    }
}

/* y[i*m ..] += a.x[j*m ..] for an m x m block at block position (i, j). */
static void block_times_vector(const double *a, size_t m, size_t i, size_t j, const double *x,
                               double *y) {
    const double *xs = x + j * m;
    for (size_t r = 0; r < m; r++) {
        double s = 0.0;
        for (size_t k = 0; k < m; k++) s += a[r * m + k] * xs[k];
        y[i * m + r] += s;
    }
}

/* Sends `blk` (b x b doubles) to rank `to` and replaces it with the block from rank `from`
 * (nothing to do when both are this rank). */
static void shift(double *blk, int count, int to, int from) {
    if (to == me && from == me) return;
    MPI_Sendrecv_replace(blk, count, MPI_DOUBLE, to, 0, from, 0, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
}

/* The timed part: the skew, then q steps of block product and shift. */
static void cannon(const struct grid *g, double *a, double *b, double *c) {
    size_t q = g->q, i = (size_t)me / q, j = (size_t)me % q;
    int count = (int)(g->b * g->b);
    shift(a, count, grid_rank(g, i, j + q - i), grid_rank(g, i, j + i));
    shift(b, count, grid_rank(g, i + q - j, j), grid_rank(g, i + j, j));
    int left = grid_rank(g, i, j + q - 1), right = grid_rank(g, i, j + 1);
    int up = grid_rank(g, i + q - 1, j), down = grid_rank(g, i + 1, j);
    for (size_t step = 0; step < q; step++) {
        multiply_add(a, b, c, g->b);
        if (step + 1 < q) {
            shift(a, count, left, right);
            shift(b, count, up, down);
        }
    }
}

/* y = sum over ranks of this rank's block times v (collective). */
static void times(const struct grid *g, const double *blk, const double *v, double *y,
                  double *part) {
    size_t len = g->q * g->b;
    memset(part, 0, len * sizeof *part);
    block_times_vector(blk, g->b, (size_t)me / g->q, (size_t)me % g->q, v, part);
    MPI_Allreduce(part, y, (int)len, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

/* Checks C.x = A.(B.x) for x_r = unit(hash(23, r)), each product from the generated blocks,
 * to a relative 1e-9 (rank 0 reports: every rank has the same vectors). */
static const char *check(const struct grid *g, const double *a0, const double *b0,
                         const double *c, char *err, size_t errlen) {
    size_t len = g->q * g->b;
    double *x = xmalloc(len * sizeof *x), *cx = xmalloc(len * sizeof *cx);
    double *bx = xmalloc(len * sizeof *bx), *abx = xmalloc(len * sizeof *abx);
    double *part = xmalloc(len * sizeof *part);
    for (size_t r = 0; r < len; r++) x[r] = r < g->n ? unit(hash(23, (uint64_t)r)) : 0.0;
    times(g, c, x, cx, part);
    times(g, b0, x, bx, part);
    times(g, a0, bx, abx, part);
    double dd = 0.0, nn = 0.0;
    for (size_t r = 0; r < len; r++) {
        dd += (cx[r] - abx[r]) * (cx[r] - abx[r]);
        nn += abx[r] * abx[r];
    }
    double rel = sqrt(dd) / sqrt(nn);
    const char *bad = NULL;
    if (me == 0 && (rel >= 1e-9 || isnan(rel))) {
        size_t worst = 0;
        for (size_t r = 1; r < len; r++)
            if (fabs(cx[r] - abx[r]) > fabs(cx[worst] - abx[worst])) worst = r;
        snprintf(err, errlen, "C.x differs from A.(B.x) by a relative %.2e (row %zu: %g vs %g)",
                 rel, worst, cx[worst], abx[worst]);
        bad = err;
    }
    free(x);
    free(cx);
    free(bx);
    free(abx);
    free(part);
    return bad;
}

int main(int argc, char **argv) {
    struct size size;
    int corrupt;
    harness_init(&argc, &argv, &size, &corrupt);

    size_t q = 1;
    while ((q + 1) * (q + 1) <= (size_t)nprocs) q++;
    if (q * q != (size_t)nprocs) {
        if (me == 0)
            fprintf(stderr,
                    "%s: the number of ranks must be a perfect square (1, 4, 9, 16, ...) for a "
                    "square grid, not %d\n",
                    NAME, nprocs);
        finish(2);
    }
    uint64_t n = pick(size, 100, 2560);
    if (n == 0) die("--size: the matrix order must be at least 1");
    struct grid g = {(size_t)n, q, ((size_t)n + q - 1) / q};
    if (g.b > 46340 || g.q * g.b > INT_MAX) die("--size: blocks too large for MPI int counts");
    size_t i = (size_t)me / q, j = (size_t)me % q;
    double *a0 = make_block(&g, i, j, 21), *b0 = make_block(&g, i, j, 22);
    double *a = xmalloc(g.b * g.b * sizeof *a), *b = xmalloc(g.b * g.b * sizeof *b);
    double *c = xmalloc(g.b * g.b * sizeof *c);
    memcpy(a, a0, g.b * g.b * sizeof *a);
    memcpy(b, b0, g.b * g.b * sizeof *b);
    memset(c, 0, g.b * g.b * sizeof *c);

    double t0 = timed_start();
    cannon(&g, a, b, c);
    double seconds = timed_end(t0);

    if (corrupt && me == 0) c[0] += 1.0;
    char err[256];
    const char *error = check(&g, a0, b0, c, err, sizeof err);
    char problem[64];
    snprintf(problem, sizeof problem, "%zux%zu matrices", g.n, g.n);
    free(a0);
    free(b0);
    free(a);
    free(b);
    free(c);
    report(problem, seconds, error);
    return 0;
}
