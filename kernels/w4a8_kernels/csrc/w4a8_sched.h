/*
 * Dynamic work sharing for the C engines (included by each: one static copy per library).
 *
 * A call is a count of items; the calling thread and the pool's workers take the next item
 * from one atomic counter until none is left, and the call returns when every item is done.
 * Nobody waits for a thread that has not started: a worker descheduled by another process
 * (a 2-core machine running anything else) costs the items it did not take, not a time
 * slice. A static split waiting at a barrier (OpenMP's, or a join) cost a whole slice per
 * call when one thread was descheduled: w4a8_native at M = 1, N = K = 3072 went from 0.08
 * to 6.3 ms beside one busy process.
 *
 * The counter word packs (call sequence, parties, items, next item), so a worker claims an
 * item of the call it saw with one compare-and-swap, and a late worker's claim on a call
 * that ended fails instead of touching the next call's data. A worker holds back the "done"
 * of its last item until it has claimed the next (or run `leave`), so the call's context
 * outlives every access to it. Items never depend on which thread runs them, nor on their
 * order: the bits are the single-thread result's.
 *
 * Workers spin a short while after a call (back-to-back layers find them awake), then
 * sleep on a condition variable. The caller, once no item is left, spins on the done count,
 * then yields its core (a worker holding the last item may be waiting for one). One call
 * at a time uses the pool; a concurrent call (another Python thread) runs on its own thread.
 *
 * sched_test_stall_us (exported per library as <prefix>_sched_test_stall): a worker sleeps
 * that long after waking for a call, before it takes an item; a test of the above.
 */
#ifndef W4A8_SCHED_H
#define W4A8_SCHED_H

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

typedef struct {
  void (*run)(void* ctx, int slot, int64_t item); /* one item; slot 0 is the caller */
  void (*enter)(void* ctx, int slot);             /* before a thread's first item, or NULL */
  void (*leave)(void* ctx, int slot);             /* after its last item, or NULL */
  void* ctx;
} sched_work_t;

#define SCHED_MAX_SLOTS 64 /* the caller and up to 63 workers */
#define SCHED_MAX_ITEMS ((1 << 19) - 1)
#define SCHED_SPINS (1 << 12) /* _mm_pause rounds (about 0.1-0.5 ms) before a worker sleeps */
#define SCHED_WAIT_SPINS (1 << 10) /* the caller's pause rounds between yields */

/* word: seq (20 bits) | parties - 1 (6) | items (19) | next (19) */
#define W_SEQ(w) ((int64_t)((uint64_t)(w) >> 44))
#define W_PARTIES(w) ((int)(((uint64_t)(w) >> 38) & 63) + 1)
#define W_ITEMS(w) ((int64_t)(((uint64_t)(w) >> 19) & SCHED_MAX_ITEMS))
#define W_NEXT(w) ((int64_t)((uint64_t)(w) & SCHED_MAX_ITEMS))
#define W_MAKE(seq, parties, items) \
  ((int64_t)((((uint64_t)(seq) & 0xFFFFF) << 44) | ((uint64_t)((parties) - 1) << 38) | ((uint64_t)(items) << 19)))

static struct {
  pthread_mutex_t call, mu;
  pthread_cond_t cv;
  int nworkers;
  uint64_t seq;
  _Atomic int64_t word;
  _Atomic int64_t done;
  const sched_work_t* work;
  int64_t born[SCHED_MAX_SLOTS]; /* the word when worker i started: its first call is the next */
  int stall_us;
} sched_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* The next item of the call whose word was `seen` (any later claim on it), or -1. */
static inline int64_t sched_claim(int64_t seen) {
  int64_t w = __atomic_load_n(&sched_pool.word, __ATOMIC_ACQUIRE);
  for (;;) {
    if (W_SEQ(w) != W_SEQ(seen) || W_NEXT(w) >= W_ITEMS(w)) return -1;
    if (__atomic_compare_exchange_n(&sched_pool.word, &w, w + 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return W_NEXT(w);
  }
}

/* Items of the call `seen` until none is left; the done count of the last one is added
   after `leave`, the thread's last access to the call. */
static void sched_take(int64_t seen, int slot) {
  int64_t item = sched_claim(seen);
  if (item < 0) return;
  const sched_work_t* wk = sched_pool.work; /* this call's: it cannot end before item is done */
  if (wk->enter) wk->enter(wk->ctx, slot);
  for (;;) {
    wk->run(wk->ctx, slot, item);
    const int64_t next = sched_claim(seen);
    if (next < 0) break;
    __atomic_fetch_add(&sched_pool.done, 1, __ATOMIC_RELEASE);
    item = next;
  }
  if (wk->leave) wk->leave(wk->ctx, slot);
  __atomic_fetch_add(&sched_pool.done, 1, __ATOMIC_RELEASE);
}

static void* sched_worker(void* arg) {
  const int id = (int)(intptr_t)arg; /* 1.. */
  int64_t seen = sched_pool.born[id];
  for (;;) {
    int64_t w;
    int spins = 0;
    while (W_SEQ(w = __atomic_load_n(&sched_pool.word, __ATOMIC_ACQUIRE)) == W_SEQ(seen)) {
      if (++spins < SCHED_SPINS) { _mm_pause(); continue; }
      pthread_mutex_lock(&sched_pool.mu);
      while (W_SEQ(w = __atomic_load_n(&sched_pool.word, __ATOMIC_ACQUIRE)) == W_SEQ(seen))
        pthread_cond_wait(&sched_pool.cv, &sched_pool.mu);
      pthread_mutex_unlock(&sched_pool.mu);
      break;
    }
    seen = w;
    if (id >= W_PARTIES(w)) continue;
    const int stall = __atomic_load_n(&sched_pool.stall_us, __ATOMIC_RELAXED);
    if (stall > 0) {
      struct timespec ts = {stall / 1000000, (long)(stall % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
    sched_take(seen, id);
  }
  return NULL;
}

/* a forked child has none of the parent's workers */
static void sched_after_fork(void) {
  pthread_mutex_init(&sched_pool.call, NULL);
  pthread_mutex_init(&sched_pool.mu, NULL);
  pthread_cond_init(&sched_pool.cv, NULL);
  sched_pool.nworkers = 0;
}

/* All of one thread's items, in order: no pool, no atomics. */
static void sched_serial(const sched_work_t* wk, int64_t items) {
  if (items <= 0) return;
  if (wk->enter) wk->enter(wk->ctx, 0);
  for (int64_t i = 0; i < items; ++i) wk->run(wk->ctx, 0, i);
  if (wk->leave) wk->leave(wk->ctx, 0);
}

/* Runs items [0, items) of wk on this thread and up to nthreads - 1 workers. */
static void sched_run(const sched_work_t* wk, int64_t items, int nthreads) {
  if (nthreads > SCHED_MAX_SLOTS) nthreads = SCHED_MAX_SLOTS;
  if (nthreads > items) nthreads = (int)items;
  if (nthreads <= 1 || items > SCHED_MAX_ITEMS || pthread_mutex_trylock(&sched_pool.call) != 0) {
    sched_serial(wk, items); /* the pool is another call's */
    return;
  }
  if (sched_pool.nworkers == 0 && sched_pool.seq == 0) pthread_atfork(NULL, NULL, sched_after_fork);
  while (sched_pool.nworkers < nthreads - 1) {
    pthread_t t;
    sched_pool.born[sched_pool.nworkers + 1] = __atomic_load_n(&sched_pool.word, __ATOMIC_RELAXED);
    if (pthread_create(&t, NULL, sched_worker, (void*)(intptr_t)(sched_pool.nworkers + 1)) != 0) break;
    pthread_detach(t);
    ++sched_pool.nworkers;
  }
  const int parties = nthreads - 1 < sched_pool.nworkers ? nthreads : sched_pool.nworkers + 1;
  sched_pool.work = wk;
  __atomic_store_n(&sched_pool.done, 0, __ATOMIC_RELAXED);
  const int64_t w = W_MAKE(++sched_pool.seq, parties, items);
  pthread_mutex_lock(&sched_pool.mu);
  __atomic_store_n(&sched_pool.word, w, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&sched_pool.cv);
  pthread_mutex_unlock(&sched_pool.mu);
  sched_take(w, 0);
  for (int spins = 0; __atomic_load_n(&sched_pool.done, __ATOMIC_ACQUIRE) < items;) {
    if (++spins < SCHED_WAIT_SPINS) { _mm_pause(); continue; }
    spins = 0;
    sched_yield();
  }
  pthread_mutex_unlock(&sched_pool.call);
}

static void sched_set_stall(int us) { __atomic_store_n(&sched_pool.stall_us, us, __ATOMIC_RELAXED); }

#endif
