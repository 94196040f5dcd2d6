/* The entry points of machine_bench.c, as cffi reads them (caten_lab/runtime/machine.py). */
void caten_bench_threads(int n);
double caten_bench_bandwidth(int64_t n, int reps);
double caten_bench_flops(int64_t iters, int reps);
