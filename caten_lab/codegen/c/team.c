/* The team's shared state and its run / barrier / worker functions (caten_lab/codegen/c/team.c): pasted
   once into the entry's translation unit of a tensor program (codegen/render.py), after team.h. */
CL_HIDDEN __thread int cl_team_tid = 0;
CL_HIDDEN __thread int cl_team_nth = 1;
CL_HIDDEN __thread int64_t cl_team_own = 0;
CL_HIDDEN int64_t cl_team_next = 0;
static struct {
  pthread_mutex_t mu, run;
  pthread_cond_t cv;
  pthread_t threads[CL_TEAM_MAX];
  int workers, nth, gen, base_gen, done, sleeping, quit, bar_count, bar_sense, wanted, solo, solo_len;
  double waited; /* seconds the threads of this run spent waiting past the spin (a starved team) */
  void (*fn)(void *);
  void *arg;
} cl_team = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
CL_HIDDEN void cl_team_barrier(void) {
  int n = cl_team_nth;
  if (n <= 1) return;
  int sense = __atomic_load_n(&cl_team.bar_sense, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&cl_team.bar_count, 1, __ATOMIC_ACQ_REL) == n) {
    __atomic_store_n(&cl_team_next, 0, __ATOMIC_RELAXED); /* every claim of the last epoch is done */
    __atomic_store_n(&cl_team.bar_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cl_team.bar_sense, !sense, __ATOMIC_RELEASE);
    return;
  }
  double t0 = 0.0;
  for (long i = 0; __atomic_load_n(&cl_team.bar_sense, __ATOMIC_ACQUIRE) == sense; i++) {
    if (i < CL_TEAM_BARRIER_SPIN) { cl_pause(); continue; }
    if (i == CL_TEAM_BARRIER_SPIN) t0 = cl_now();
    sched_yield();
  }
  if (t0 != 0.0) {
    double dt = cl_now() - t0;
    pthread_mutex_lock(&cl_team.mu);
    cl_team.waited += dt;
    pthread_mutex_unlock(&cl_team.mu);
  }
}
static void *cl_team_worker(void *p) {
  int id = (int)(intptr_t)p, seen = cl_team.base_gen; /* the generation before the run that made it */
  for (;;) {
    int g;
    for (long i = 0; (g = __atomic_load_n(&cl_team.gen, __ATOMIC_SEQ_CST)) == seen; i++) {
      if (__atomic_load_n(&cl_team.quit, __ATOMIC_ACQUIRE)) return 0;
      if (i < CL_TEAM_IDLE_SPIN) { cl_pause(); continue; }
      pthread_mutex_lock(&cl_team.mu);
      __atomic_add_fetch(&cl_team.sleeping, 1, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(&cl_team.gen, __ATOMIC_SEQ_CST) == seen && !cl_team.quit)
        pthread_cond_wait(&cl_team.cv, &cl_team.mu);
      __atomic_sub_fetch(&cl_team.sleeping, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock(&cl_team.mu);
      i = 0;
    }
    seen = g;
    if (id < cl_team.nth) {
      cl_team_tid = id;
      cl_team_nth = cl_team.nth;
      cl_team.fn(cl_team.arg);
      cl_team_tid = 0;
      cl_team_nth = 1;
    }
    __atomic_add_fetch(&cl_team.done, 1, __ATOMIC_RELEASE);
  }
}
static void cl_team_stop(void) {
  if (!cl_team.workers) return;
  pthread_mutex_lock(&cl_team.mu);
  __atomic_store_n(&cl_team.quit, 1, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&cl_team.cv);
  pthread_mutex_unlock(&cl_team.mu);
  for (int i = 0; i < cl_team.workers; i++) pthread_join(cl_team.threads[i], 0);
  cl_team.workers = 0;
  cl_team.quit = 0;
}
__attribute__((destructor)) static void cl_team_unload(void) { cl_team_stop(); }
static void cl_team_forked(void) { /* the child has no workers: start again */
  cl_team.workers = 0;
  pthread_mutex_init(&cl_team.mu, 0);
  pthread_mutex_init(&cl_team.run, 0);
  pthread_cond_init(&cl_team.cv, 0);
}
__attribute__((constructor)) static void cl_team_load(void) { pthread_atfork(0, 0, cl_team_forked); }
static void cl_set_team(int n) { cl_team.wanted = n < 1 ? 1 : n > CL_TEAM_MAX ? CL_TEAM_MAX : n; }
#undef CL_SET_TEAM
#define CL_SET_TEAM(n) cl_set_team(n)
/* A library nobody told its thread count (caten_set_threads: the Python runtime always does; an exported
   library's own program may not): CATEN_THREADS, else OMP_NUM_THREADS, else the online CPUs. */
static int cl_team_default(void) {
  const char *names[] = {"CATEN_THREADS", "OMP_NUM_THREADS"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
/* Run fn(arg) on the team's threads (the caller is thread 0); serial when the team is busy (another
   thread of the process is running this library) or wanted at one thread. */
static void cl_team_run(void (*fn)(void *), void *arg) {
  if (!cl_team.wanted) cl_set_team(cl_team_default());
  int n = cl_team.wanted;
  if (n <= 1 || pthread_mutex_trylock(&cl_team.run) != 0) { fn(arg); return; }
  if (cl_team.solo > 0) { /* the team was starved lately: alone for a while, then try again */
    cl_team.solo--;
    fn(arg);
    pthread_mutex_unlock(&cl_team.run);
    return;
  }
  double start = cl_now();
  cl_team.waited = 0.0;
  cl_team.base_gen = cl_team.gen;
  while (cl_team.workers < n - 1) {
    int id = cl_team.workers + 1;
    if (pthread_create(&cl_team.threads[cl_team.workers], 0, cl_team_worker, (void *)(intptr_t)id)) break;
    cl_team.workers++;
  }
  if (n > cl_team.workers + 1) n = cl_team.workers + 1;
  cl_team.fn = fn;
  cl_team.arg = arg;
  cl_team.nth = n;
  __atomic_store_n(&cl_team.done, 0, __ATOMIC_RELAXED);
  __atomic_add_fetch(&cl_team.gen, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&cl_team.sleeping, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&cl_team.mu);
    pthread_cond_broadcast(&cl_team.cv);
    pthread_mutex_unlock(&cl_team.mu);
  }
  cl_team_tid = 0;
  cl_team_nth = n;
  fn(arg);
  cl_team_nth = 1;
  for (long i = 0; __atomic_load_n(&cl_team.done, __ATOMIC_ACQUIRE) < cl_team.workers; i++) {
    if (i < CL_TEAM_BARRIER_SPIN) cl_pause(); else sched_yield();
  }
  /* Starved: the threads waited for each other (a thread whose core another process holds) for more
     than a quarter of their time. Run alone for the next solo_len runs (doubling while it lasts, up to
     CL_TEAM_SOLO_MAX), then try the team again: a busy second core costs about one thread's speed, not
     a team stalled at every barrier. */
  double run = cl_now() - start;
  if (run > 2e-4 && cl_team.waited > 0.25 * run * n) {
    cl_team.solo_len = cl_team.solo_len ? (cl_team.solo_len * 2 > CL_TEAM_SOLO_MAX ? CL_TEAM_SOLO_MAX
                                                                                   : cl_team.solo_len * 2)
                                        : CL_TEAM_SOLO_MIN;
    cl_team.solo = cl_team.solo_len;
  } else {
    cl_team.solo_len = 0;
  }
  pthread_mutex_unlock(&cl_team.run);
}
