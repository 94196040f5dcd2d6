/* A persistent team of worker threads for one tensor program (caten_lab/codegen/c/team.h).

   A program run with several threads is ONE parallel region: caten_run hands the whole call table to
   the team (cl_team_run), every thread walks it, each kernel's parallel loop is split into chunks the
   threads claim (cl_team_chunk, the `team` codegen pass), and a barrier separates
   kernels that depend on each other. A decode step then wakes the workers once, not once per kernel
   (an OpenMP `parallel for` per kernel paid a wake-up of its sleeping threads per kernel).

   Waiting: a barrier spins (pause) for a short while, then yields the core (sched_yield) until the
   others arrive. Loops are chunks the threads claim, so a thread whose core another process holds
   leaves its share to the others; and a run in which the threads waited for each other more than a
   quarter of the time makes the next runs go alone for a while (cl_team_run), so a busy second core
   costs about one thread's speed, not a team stalled at every barrier. Between runs the workers spin
   for CL_TEAM_IDLE_SPIN pauses (the Python between two decode steps), then sleep on a condition
   variable.

   Shared state lives in the entry's translation unit (team.c, pasted there once by the renderer);
   kernels in other units (a parallel build) reach the thread's id through the hidden-visibility
   thread-locals declared here. The library's destructor stops and joins the workers before the code
   they run is unmapped (dlclose), and a fork()ed child starts without workers. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#define CL_TEAM_MAX 64
#define CL_TEAM_BARRIER_SPIN 4096 /* pauses before a waiting thread starts yielding its core */
#define CL_TEAM_IDLE_SPIN 20000   /* pauses an idle worker spins before it sleeps (~0.2-0.5 ms) */
#define CL_TEAM_CHUNKS 4          /* chunks per thread of a parallel loop */
#define CL_TEAM_SOLO_MIN 8        /* runs alone after a starved team run (doubling while starved) */
#define CL_TEAM_SOLO_MAX 256

#define CL_HIDDEN __attribute__((visibility("hidden")))
extern CL_HIDDEN __thread int cl_team_tid; /* this thread's id in the running team (0: the caller) */
extern CL_HIDDEN __thread int cl_team_nth; /* threads of the running team (1 outside a team run) */
extern CL_HIDDEN __thread int64_t cl_team_own; /* the next chunk of a loop run by one thread */
extern CL_HIDDEN int64_t cl_team_next;         /* the next chunk (or single) to claim; 0 after a barrier */
CL_HIDDEN void cl_team_barrier(void);

static inline void cl_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Loops run in chunks that threads claim from a shared counter (reset at every barrier): a thread that
   is not running (its core busy with another process) leaves its chunks to the others. The next chunk of
   an n-iteration loop into r[0], r[1] (iterations [r[0], r[1])); 0 when none is left. With `on` false (a
   loop below the parallel work threshold) the loop is one chunk, for whichever thread claims it first. */
static inline int cl_team_chunk(int64_t n, int on, int64_t *r) {
  int nth = cl_team_nth;
  int64_t parts = !on || nth <= 1 ? 1 : n < CL_TEAM_CHUNKS * nth ? n : CL_TEAM_CHUNKS * nth;
  int64_t c = nth <= 1 ? cl_team_own++ : __atomic_fetch_add(&cl_team_next, 1, __ATOMIC_RELAXED);
  if (c >= parts) {
    cl_team_own = 0;
    return 0;
  }
  int64_t q = n / parts, m = n % parts;
  r[0] = q * c + (c < m ? c : m);
  r[1] = r[0] + q + (c < m);
  return 1;
}
/* Whether this thread runs a kernel's serial statements that write memory the others read: the first
   thread to ask between two barriers. */
static inline int cl_team_single(void) {
  return cl_team_nth <= 1 || __atomic_fetch_add(&cl_team_next, 1, __ATOMIC_RELAXED) == 0;
}

/* The entry's call table walked by every thread of the team (cl_run_table's team twin; the entry runs
   cl_team_run(cl_team_step, &args)): a barrier after each call, so the next kernel reads complete outputs;
   every thread sees the first error after it and stops. prof (or NULL): the first thread times each call,
   its barrier included. */
static inline void cl_team_step(void *arg) {
  const cl_call_args *a = (const cl_call_args *)arg;
  void *p[a->maxp];
  int32_t k = 0;
  for (int32_t c = 0; c < a->n; c++) {
    for (int32_t i = 0; i < a->argc[c]; i++) p[i] = a->b[a->args[k + i]];
    k += a->argc[c];
    double t0 = a->prof && cl_team_tid == 0 ? cl_now() : 0.0;
    a->calls[c](p, a->sym, a->err);
    cl_team_barrier();
    if (a->prof && cl_team_tid == 0) a->prof[c] += cl_now() - t0;
    if (__atomic_load_n(&a->err[0], __ATOMIC_RELAXED)) {
      if (cl_team_tid == 0) a->err[4] = c;
      return;
    }
  }
}
/* caten_set_threads: the team's size too, in a library that has one (team.c defines it) */
#ifndef CL_SET_TEAM
#define CL_SET_TEAM(n) ((void)(n))
#endif
