// How a one-cache-line round trip grows with the work each side does between seeing the
// other's line and writing its own: the machine's answer to "how long may a runtime's path
// be?". Built and run by scripts/answer-window (see there).
//
// Two processes pinned to CPUs 0 and 1 ping-pong a counter through two lines of a shared
// mapping, spinning with `pause` as the floor of `volley bench am` does. After seeing each
// value, the requester does `wq` and the responder `wr` dependent one-cycle adds before
// answering. All configurations run interleaved in one pair of processes, `rounds` times, so
// that the VM's changes of state hit them alike; each figure is the median over the rounds of
// the configuration's round trip divided by the first configuration's in the same round.
//
// usage: answer-window ROUNDS WQ1 WR1 [WQ2 WR2 ...]   (the first pair is the reference)
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define MAX_CONFIGS 64
#define MAX_ROUNDS 1000
#define ITERS 20000L

typedef struct {
    volatile uint64_t value;
    char pad[56];
} line;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("answer-window: sched_setaffinity");
        exit(1);
    }
}

// `w` dependent adds: about `w` cycles that the CPU cannot overlap with each other.
static inline uint64_t work(uint64_t x, int w) {
    for (int i = 0; i < w; i++)
        __asm__ volatile("add $1, %0" : "+r"(x));
    return x;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, by_value);
    return v[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2 != 0) {
        fprintf(stderr, "usage: answer-window ROUNDS WQ1 WR1 [WQ2 WR2 ...]\n");
        return 2;
    }
    int rounds = atoi(argv[1]);
    int n = (argc - 2) / 2;
    if (rounds < 1 || rounds > MAX_ROUNDS || n > MAX_CONFIGS) {
        fprintf(stderr, "answer-window: 1..%d rounds and at most %d pairs\n", MAX_ROUNDS,
                MAX_CONFIGS);
        return 2;
    }
    int wq[MAX_CONFIGS], wr[MAX_CONFIGS];
    for (int c = 0; c < n; c++) {
        wq[c] = atoi(argv[2 + 2 * c]);
        wr[c] = atoi(argv[3 + 2 * c]);
    }
    line *lines = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lines == MAP_FAILED) {
        perror("answer-window: mmap");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("answer-window: fork");
        return 1;
    }
    if (child == 0) {
        pin(1);
        uint64_t acc = 0, k = 0;
        for (int r = 0; r < rounds; r++)
            for (int c = 0; c < n; c++)
                for (long i = 0; i < ITERS; i++) {
                    k++;
                    while (lines[0].value != k)
                        _mm_pause();
                    acc = work(acc, wr[c]);
                    // `acc & 0` keeps the work on the path to the store.
                    lines[1].value = k + (acc & 0);
                }
        _exit(0);
    }
    pin(0);
    static double ns[MAX_CONFIGS][MAX_ROUNDS];
    uint64_t acc = 0, k = 0;
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < n; c++) {
            double t0 = 0;
            for (long i = 0; i < ITERS; i++) {
                if (i == ITERS / 10)
                    t0 = now_ns();  // the first tenth warms up
                k++;
                lines[0].value = k + (acc & 0);
                while (lines[1].value != k)
                    _mm_pause();
                acc = work(acc, wq[c]);
            }
            ns[c][r] = (now_ns() - t0) / (ITERS - ITERS / 10);
        }
    waitpid(child, NULL, 0);
    printf("requester_adds responder_adds rtt_over_reference rtt_ns\n");
    for (int c = 0; c < n; c++) {
        double ratio[MAX_ROUNDS], abs_ns[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            ratio[r] = ns[c][r] / ns[0][r];
            abs_ns[r] = ns[c][r];
        }
        printf("%d %d %.3f %.1f\n", wq[c], wr[c], median(ratio, rounds), median(abs_ns, rounds));
    }
    return 0;
}
