/* caten_lab machine benchmark: this machine's memory bandwidth and peak float32 FLOP/s, measured
 * once per CPU model + toolchain (caten_lab/runtime/machine.py) for the Inspector's roofline.
 * Built with the runtime's own compiler and flags (-O3, -march=native, -fopenmp when available),
 * so the ceilings are the ones the generated kernels can reach. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void caten_bench_threads(int n) {
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* STREAM triad a = b + s*c over n floats, best of reps: bytes per second (12 bytes per element). */
double caten_bench_bandwidth(int64_t n, int reps) {
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n),
          *c = malloc(sizeof(float) * (size_t)n);
    if (!a || !b || !c) { free(a); free(b); free(c); return 0.0; }
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const float s = 0.5f + (float)r;
        double t0 = now_s();
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a); free(b); free(c);
    return 12.0 * (double)n / best;
}

#define LANES 128 /* independent multiply-add chains per thread: enough to fill every FMA pipe */

/* Independent multiply-adds (2 flops each) on register-resident data, best of reps: FLOP/s. */
double caten_bench_flops(int64_t iters, int reps) {
    double best = 1e30;
    volatile float sink = 0.0f;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        float total = 0.0f;
        #pragma omp parallel reduction(+ : total)
        {
            float acc[LANES];
            for (int i = 0; i < LANES; i++) acc[i] = 1e-3f * (float)i;
            const float m = 0.9999999f, add = 1e-7f;
            for (int64_t it = 0; it < iters; it++) {
                #pragma omp simd
                for (int i = 0; i < LANES; i++) acc[i] = acc[i] * m + add;
            }
            for (int i = 0; i < LANES; i++) total += acc[i];
        }
        double t = now_s() - t0;
        sink += total;
        if (t < best) best = t;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    return 2.0 * LANES * (double)iters * (double)threads / best;
}
