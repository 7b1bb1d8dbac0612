/* The volley-apps harness (apps/src/lib.rs), ported to C for the MPI peers of the suite
 * (radixb.c, sampleb.c, cannon.c): joining the job and the arguments (--size, --corrupt,
 * --help), volley-apps' SplitMix64-based hash (so the inputs are bit-for-bit the volley
 * programs'), timing the parallel phase between barriers, and the one result line that
 * `volley apps` reads, with the exit status. With HARNESS_SORTS defined, also the input of
 * the sorts and the check of a distributed sort (volley_apps::check_sorted).
 *
 * A program defines NAME (its name in messages and in the result line, "PROGRAM-mpi") and,
 * if it sorts, HARNESS_SORTS, then includes this file. Everything here is static: each
 * program compiles its own copy. `volley apps` embeds this header with the programs and
 * writes it next to them before compiling (crates/volley-cli/src/apps_mpi.rs).
 */
#ifndef VOLLEY_APPS_MPI_HARNESS_H
#define VOLLEY_APPS_MPI_HARNESS_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NAME
#error "define NAME (the program's name) before including harness.h"
#endif

/* This rank and the number of ranks (set by harness_init). */
static int me, nprocs;

/* Exits the job with `msg` on standard error. */
static void die(const char *msg) {
    fprintf(stderr, "%s: rank %d: %s\n", NAME, me, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL) die("out of memory");
    return p;
}

/* SplitMix64, as volley_apps::Rng::next_u64. */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z;
    *state += 0x9E3779B97F4A7C15ULL;
    z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The i-th value of the stream `seed`, as volley_apps::hash. */
static uint64_t hash(uint64_t seed, uint64_t i) {
    uint64_t s = seed ^ (i * 0xD6E8FEB86659FD93ULL);
    return rng_next(&s);
}

#ifdef HARNESS_SORTS

static uint64_t rotl(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

/* volley_apps::multiset_checksum: sum and xor of a mix of each key. */
static void multiset_checksum(const uint64_t *keys, size_t n, uint64_t out[2]) {
    uint64_t s0 = 0, s1 = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = hash(0x5eed, keys[i]);
        s0 += h;
        s1 ^= rotl(h, 17);
    }
    out[0] = s0;
    out[1] = s1;
}

/* volley_apps::input_checksum: the checksum words combined over ranks (wrapping sum, xor). */
static void input_checksum(const uint64_t *keys, size_t n, uint64_t out[2]) {
    uint64_t c[2];
    multiset_checksum(keys, n, c);
    MPI_Allreduce(&c[0], &out[0], 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&c[1], &out[1], 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
}

/* volley_apps::check_sorted (collective): NULL when the distributed sort checks out, else
 * what is wrong (in `err`). Every rank takes part in every collective, whatever it found. */
static const char *check_sorted(const uint64_t *keys, size_t n, const uint64_t input[2],
                                char *err, size_t errlen) {
    const char *bad = NULL;
    for (size_t i = 0; i + 1 < n; i++) {
        if (keys[i] > keys[i + 1]) {
            snprintf(err, errlen, "keys %zu and %zu on rank %d are out of order", i, i + 1, me);
            bad = err;
            break;
        }
    }
    uint64_t mine[3] = {n != 0, n ? keys[0] : 0, n ? keys[n - 1] : 0};
    uint64_t *all = xmalloc(3 * (size_t)nprocs * sizeof *all);
    MPI_Allgather(mine, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T, MPI_COMM_WORLD);
    int have_last = 0, last_rank = 0;
    uint64_t last = 0;
    for (int r = 0; r < nprocs && bad == NULL; r++) {
        if (all[3 * r] == 0) continue;
        if (have_last && last > all[3 * r + 1]) {
            snprintf(err, errlen, "rank %d ends with %llu but rank %d starts with %llu",
                     last_rank, (unsigned long long)last, r, (unsigned long long)all[3 * r + 1]);
            bad = err;
        }
        have_last = 1;
        last_rank = r;
        last = all[3 * r + 2];
    }
    free(all);
    uint64_t now[2];
    input_checksum(keys, n, now);
    if (bad == NULL && (now[0] != input[0] || now[1] != input[1])) {
        snprintf(err, errlen,
                 "the sorted keys are not a permutation of the input (checksums differ)");
        bad = err;
    }
    return bad;
}

/* This rank's `per` input keys, as volley_apps::sort::input_keys: key i of the job (rank r
 * holds keys r*per .. r*per+per-1) is hash(7, i); `input` gets the checksum of every rank's
 * keys (collective: input_checksum). */
static void input_keys(uint64_t *keys, size_t per, uint64_t input[2]) {
    for (size_t l = 0; l < per; l++) keys[l] = hash(7, (uint64_t)((size_t)me * per + l));
    input_checksum(keys, per, input);
}

#endif /* HARNESS_SORTS */

/* `--size`: test, default, or a number (underscores allowed). */
enum size_kind { SIZE_TEST, SIZE_DEFAULT, SIZE_CUSTOM };
struct size {
    enum size_kind kind;
    uint64_t n;
};

/* volley_apps::Size::pick. */
static uint64_t pick(struct size s, uint64_t test, uint64_t dflt) {
    return s.kind == SIZE_TEST ? test : s.kind == SIZE_DEFAULT ? dflt : s.n;
}

/* Leaves the job with `status` after MPI_Finalize (every rank gets here together). */
static void finish(int status) {
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    exit(status);
}

/* Parses a decimal u64 with optional underscores; 0 when it is not one. */
static int parse_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    int digits = 0;
    for (; *s; s++) {
        if (*s == '_') continue;
        if (*s < '0' || *s > '9') return 0;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
        digits++;
    }
    *out = v;
    return digits > 0;
}

/* volley_apps' parse_args: --size, --corrupt, --help. */
static void parse_args(int argc, char **argv, struct size *size, int *corrupt) {
    size->kind = SIZE_DEFAULT;
    size->n = 0;
    *corrupt = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--size") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "test") == 0) {
                size->kind = SIZE_TEST;
            } else if (strcmp(v, "default") == 0) {
                size->kind = SIZE_DEFAULT;
            } else if (parse_u64(v, &size->n)) {
                size->kind = SIZE_CUSTOM;
            } else {
                if (me == 0)
                    fprintf(stderr, "%s: --size takes test, default or a number, not \"%s\"\n",
                            NAME, v);
                finish(2);
            }
        } else if (strcmp(a, "--corrupt") == 0) {
            *corrupt = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            if (me == 0)
                printf("usage: mpirun -n P %s [--size test|default|N] [--corrupt]\n", NAME);
            finish(0);
        } else {
            if (me == 0) fprintf(stderr, "%s: unknown argument \"%s\" (try --help)\n", NAME, a);
            finish(2);
        }
    }
}

/* Joins the job (MPI_Init; `me` and `nprocs`) and parses the arguments (parse_args). */
static void harness_init(int *argc, char ***argv, struct size *size, int *corrupt) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    parse_args(*argc, *argv, size, corrupt);
}

/* Starts the timed phase as volley-apps' `Ctx::timed` does: MPI_Barrier, then the clock
 * (returned, for timed_end). */
static double timed_start(void) {
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime();
}

/* Ends the timed phase started at `t0`: this rank's seconds, MPI_Barrier, and the slowest
 * rank's seconds (MPI_Reduce MAX to rank 0, which reports them; 0 on the other ranks). */
static double timed_end(double t0) {
    double mine = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = 0;
    MPI_Reduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return seconds;
}

/* Seconds as the shortest decimal that reads back as the same double (as serde_json). */
static void format_seconds(double s, char *buf, size_t len) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, s);
        if (strtod(buf, NULL) == s) return;
    }
}

/* Ends the program as volley_apps::run does: combines every rank's verdict, rank 0 prints
 * the result line, exit status 1 when any rank's check failed. */
static void report(const char *problem, double seconds, const char *error) {
    int mine = error != NULL, bad = 0;
    MPI_Allreduce(&mine, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (error != NULL) fprintf(stderr, "%s: rank %d: verification failed: %s\n", NAME, me, error);
    if (me == 0) {
        char secs[64];
        format_seconds(seconds, secs, sizeof secs);
        printf("volley-app {\"program\":\"%s\",\"strategy\":\"mpi\",\"ranks\":%d,"
               "\"problem\":\"%s\",\"seconds\":%s,\"verified\":%s}\n",
               NAME, nprocs, problem, secs, bad ? "false" : "true");
    }
    finish(bad ? 1 : 0);
}

#endif /* VOLLEY_APPS_MPI_HARNESS_H */
