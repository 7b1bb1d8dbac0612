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
#define BITS 8
#define PASSES (64 / BITS)
#define DIGITS (1 << BITS)

static int me, nprocs;

/* ---- shared with sampleb.c and cannon.c: the volley-apps harness, ported ---- */

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

/* ---- radixb ---- */

/* The digit of `k` that pass `shift` sorts by. */
static inline unsigned digit(uint64_t k, unsigned shift) {
    return (unsigned)(k >> shift) & (DIGITS - 1);
}

/* Stable counting sort of `keys` by digit into `out`; `counts` gets the keys of each digit. */
static void counting_sort(const uint64_t *restrict keys, uint64_t *restrict out, size_t n,
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
static void destinations(const uint64_t counts[DIGITS], uint64_t first[DIGITS]) {
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

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    struct size size;
    int corrupt;
    parse_args(argc, argv, &size, &corrupt);

    uint64_t per64 = pick(size, 16384, (uint64_t)1 << 23);
    if (per64 > INT_MAX) die("--size: at most 2^31-1 keys per rank (MPI counts are ints)");
    size_t per = (size_t)per64, p = (size_t)nprocs;
    uint64_t *keys = xmalloc(per * sizeof *keys);
    uint64_t *by_digit = xmalloc(per * sizeof *by_digit);
    uint64_t *got = xmalloc(per * sizeof *got);
    for (size_t l = 0; l < per; l++) keys[l] = hash(7, (uint64_t)((size_t)me * per + l));
    uint64_t input[2];
    input_checksum(keys, per, input);
    int *scount = xmalloc(p * sizeof *scount), *sdispl = xmalloc(p * sizeof *sdispl);
    int *rcount = xmalloc(p * sizeof *rcount), *rdispl = xmalloc(p * sizeof *rdispl);
    uint64_t counts[DIGITS], first[DIGITS], ignored[DIGITS];

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
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
    double mine = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = 0;
    MPI_Reduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

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
