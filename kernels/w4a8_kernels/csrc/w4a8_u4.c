/*
 * W4A8 GEMM on packed int4 weights (half the bytes of w4a8_avx2.c's int8 copy), built
 * twice from this file: AVX2 (vpmaddubsw) and AVX-512 VNNI (vpdpbusd), chosen at run
 * time by the caller from the CPU's flags.
 *
 *   C[m, n] = xs[m] * sum_g s[n, g] * ( sum_{k in g} u[n, k] * a[m, k]  -  z[n, g] * asum[m, g] )
 *
 * u   the weight's unsigned nibbles in [0, 15] (w + 8 when symmetric, z = 8; the raw
 *     nibble when asymmetric, z = the zero point), so u * a is the unsigned x signed
 *     product both instructions take, and w - z = u - z.
 * a   int8 activation codes [M, lda], each group padded with zero codes to a multiple
 *     of 8 (gp); asum[m, g] is the sum of group g's codes (int32, exact).
 * Bp  [N / NR][K8][NR cols][4 bytes], K8 = G * gp / 8: byte j of column c at step s
 *     holds k = 8 s + j in its low nibble and k = 8 s + 4 + j in its high nibble.
 * zs  int32 [N / NR][G][NR], sc float [N / NR][G][NR]: zero points, scales; zs is not
 *     read when every zero point is 8 (symmetric weights: 8 * asum is the correction).
 *
 * Every integer sum is exact: |u * a| <= 15 * 127, and a group of up to 1,127,288
 * terms fits int32 (the caller checks). vpmaddubsw pairs are at most 2 * 15 * 127 =
 * 3810 and 4 steps (8 pairs) stay below 2**15, so its int16 sums never saturate.
 * Each group's integer sum is scaled in float32 and summed in group order, then
 * multiplied by xs: the order of the float64 reference (no fused multiply-add).
 *
 * Threads share the N tiles in chunks taken dynamically (w4a8_sched.h); rows are blocked
 * so one block's activations stay in L2 while the threads stream weight tiles past them.
 * w4a8_u4_linear quantizes the rows and runs the GEMM in one call (a decode call is ~0.2 ms: per-call work outside the
 * weight stream shows). Each chunk of tiles is one contiguous stream, prefetched to L1
 * PF_DIST bytes ahead: the hardware prefetchers alone fell behind when the weight came
 * from the last-level cache or DRAM (M = 1, N = K = 4096, 2 threads, a 64 MiB fp32 GEMM
 * in the same rounds evicting it, same-process A/B: AVX2 1.53 -> 0.91x the plain read
 * of its bytes, AVX-512 VNNI 1.09 -> 0.85x; M = 4-128 2-13% faster, nothing slower;
 * 0.5 KiB ahead gained a third of that, 16 KiB the same as 8; prefetchnta took the
 * weights out of the last-level cache, 1.3-1.6x slower).
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "w4a8_quant.h"
#include "w4a8_sched.h"

#if defined(W4A8_VNNI512)
#define VW 16 /* columns per vector */
#define NV 2 /* vectors per tile: each broadcast activation feeds NV dot instructions */
#define MR 6 /* 12 integer accumulators + the unpacked nibbles + broadcasts fit 32 zmm */
typedef __m512i vi;
typedef __m512 vf;
#define LOADU(p) _mm512_loadu_si512((const void*)(p))
#define AND(a, b) _mm512_and_si512(a, b)
#define SRL16(a, n) _mm512_srli_epi16(a, n)
#define SET1_8(x) _mm512_set1_epi8(x)
#define SET1_32(x) _mm512_set1_epi32(x)
#define ZERO() _mm512_setzero_si512()
#define FZERO() _mm512_setzero_ps()
#define SUB32(a, b) _mm512_sub_epi32(a, b)
#define MUL32(a, b) _mm512_mullo_epi32(a, b)
#define CVT(a) _mm512_cvtepi32_ps(a)
#define FMUL(a, b) _mm512_mul_ps(a, b)
#define FADD(a, b) _mm512_add_ps(a, b)
#define FLOADU(p) _mm512_loadu_ps(p)
#define FSET1(x) _mm512_set1_ps(x)
#define FSTOREU(p, v) _mm512_storeu_ps(p, v)
#define ADD32(a, b) _mm512_add_epi32(a, b)
#define DOT(acc, u, a) _mm512_dpbusd_epi32(acc, u, a)
#define NAME(x) x##_vnni512
#else
#define VW 8
#define NV 1
#define MR 8 /* 8 int16 sums + the nibbles, mask and a broadcast fit 16 ymm; the int32 sums go
                to L1 once per 4 steps. 8 rows: 0.93-0.95x the time of 4 at M = 128 */
#define MR_FEW 4 /* up to 8 rows, 4-row tiles: 8-row ones took 1.1x as long at M = 8 per-channel */
typedef __m256i vi;
typedef __m256 vf;
#define LOADU(p) _mm256_loadu_si256((const __m256i*)(p))
#define AND(a, b) _mm256_and_si256(a, b)
#define SRL16(a, n) _mm256_srli_epi16(a, n)
#define SET1_8(x) _mm256_set1_epi8(x)
#define SET1_32(x) _mm256_set1_epi32(x)
#define ZERO() _mm256_setzero_si256()
#define FZERO() _mm256_setzero_ps()
#define SUB32(a, b) _mm256_sub_epi32(a, b)
#define MUL32(a, b) _mm256_mullo_epi32(a, b)
#define CVT(a) _mm256_cvtepi32_ps(a)
#define FMUL(a, b) _mm256_mul_ps(a, b)
#define FADD(a, b) _mm256_add_ps(a, b)
#define FLOADU(p) _mm256_loadu_ps(p)
#define FSET1(x) _mm256_set1_ps(x)
#define FSTOREU(p, v) _mm256_storeu_ps(p, v)
#define ADD32(a, b) _mm256_add_epi32(a, b)
#define NAME(x) x##_avx2
#endif

#define NR (VW * NV)
#define PF_DIST 8192 /* bytes of the weight stream prefetched ahead (see the top) */
#define PREFETCH(p) _mm_prefetch((const char*)(p) + PF_DIST, _MM_HINT_T0)
/* Rows per block: their codes (MC x K bytes) stay in L2 while the thread's weight tiles
   stream past them once per block; about 576 KiB (144 rows at K = 4096). */
#define A_BLOCK_BYTES (576 * 1024)

static inline int32_t load4(const int8_t* p) { int32_t v; memcpy(&v, p, 4); return v; }

/* A weight as the caller laid it out once (kernels/w4a8_kernels/cpu_w4a8.py, _prepare_u4). */
typedef struct {
  const uint8_t* Bp; const int32_t* zs; const float* sc;
  int64_t N, K, g, gp, G, g8;
  int64_t symmetric; /* every zero point is 8: zs is not read */
} u4_weight_t;

/* gcc 13 warns that facc may be read unset: it cannot see that G >= 1 (the callers check
   it), so group 0 writes every element the later groups and the last loop read. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
static inline __attribute__((always_inline)) void tile(
    const int8_t* A, int64_t lda, int rows, const int32_t* asum, int64_t G, const uint8_t* Bt,
    int64_t g8, const int32_t* zt, const float* sct, const float* xs, float* C, int64_t ldc,
    int64_t ncols, int sym) {
  const vi mask = SET1_8(0x0F);
  /* the running float sums live in L1, not registers: those go to the integer
     accumulators; each is touched once per group */
  float facc[MR][NR];
  const uint8_t* bp = Bt;
  for (int64_t grp = 0; grp < G; ++grp) {
    const int8_t* a = A + grp * g8 * 8;
    vi acc[MR][NV];
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = ZERO();
#if defined(W4A8_VNNI512)
    /* one or two rows: a second accumulator per vector hides vpdpbusd's latency; more
       rows are independent chains already, and their registers are better spent on rows */
    vi acc2[2][NV];
    for (int r = 0; r < 2; ++r)
      for (int v = 0; v < NV; ++v) acc2[r][v] = ZERO();
    for (int64_t s = 0; s < g8; ++s, bp += NR * 4, a += 8) {
      PREFETCH(bp);
      PREFETCH(bp + 64); /* a step reads two lines */
      vi lo[NV], hi[NV];
      for (int v = 0; v < NV; ++v) {
        const vi p = LOADU(bp + v * VW * 4);
        lo[v] = AND(p, mask);
        hi[v] = AND(SRL16(p, 4), mask);
      }
      for (int r = 0; r < rows; ++r) {
        const vi a0 = SET1_32(load4(a + r * lda)), a1 = SET1_32(load4(a + r * lda + 4));
        for (int v = 0; v < NV; ++v) {
          if (rows <= 2) {
            acc[r][v] = DOT(acc[r][v], lo[v], a0);
            acc2[r][v] = DOT(acc2[r][v], hi[v], a1);
          } else {
            acc[r][v] = DOT(DOT(acc[r][v], lo[v], a0), hi[v], a1);
          }
        }
      }
    }
    if (rows <= 2)
      for (int r = 0; r < rows; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = ADD32(acc[r][v], acc2[r][v]);
#else
    const vi ones = _mm256_set1_epi16(1);
    /* row pointers with one offset: no address arithmetic per row and step (0.97x) */
    const int8_t* ar[MR];
    for (int r = 0; r < rows; ++r) ar[r] = a + r * lda;
    int64_t off = 0;
    for (int64_t s0 = 0; s0 < g8; s0 += 4) {
      const int64_t len = (g8 - s0) < 4 ? (g8 - s0) : 4;
      vi t[MR];
      for (int r = 0; r < MR; ++r) t[r] = ZERO();
      for (int64_t s = 0; s < len; ++s, bp += NR * 4, off += 8) {
        if (s & 1) PREFETCH(bp); /* a line every other step */
        const vi p = LOADU(bp);
        const vi lo = AND(p, mask), hi = AND(SRL16(p, 4), mask);
        for (int r = 0; r < rows; ++r) {
          t[r] = _mm256_add_epi16(t[r], _mm256_maddubs_epi16(lo, SET1_32(load4(ar[r] + off))));
          t[r] = _mm256_add_epi16(t[r], _mm256_maddubs_epi16(hi, SET1_32(load4(ar[r] + off + 4))));
        }
      }
      for (int r = 0; r < rows; ++r) acc[r][0] = ADD32(acc[r][0], _mm256_madd_epi16(t[r], ones));
    }
#endif
    for (int v = 0; v < NV; ++v) {
      const vi z = sym ? ZERO() : LOADU(zt + grp * NR + v * VW);
      const vf sc = FLOADU(sct + grp * NR + v * VW);
      for (int r = 0; r < rows; ++r) {
        /* z * asum, exact either way: |8 * asum| < 2**31 for any group the caller allows */
        const vi corr = sym ? SET1_32(8 * asum[r * G + grp]) : MUL32(z, SET1_32(asum[r * G + grp]));
        const vi dot = SUB32(acc[r][v], corr);
        const vf term = FMUL(CVT(dot), sc);
        /* 0 + the first term is the term itself: the same sum as starting from zero */
        FSTOREU(&facc[r][v * VW], grp ? FADD(FLOADU(&facc[r][v * VW]), term) : term);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < NV; ++v)
      FSTOREU(&facc[r][v * VW], FMUL(FLOADU(&facc[r][v * VW]), FSET1(xs[r])));
    memcpy(C + r * ldc, facc[r], sizeof(float) * (size_t)ncols);
  }
}
#pragma GCC diagnostic pop

typedef struct {
  const u4_weight_t* w; const int8_t* A; int64_t lda, M; const int32_t* asum; const float* xs;
  float* C; int64_t ldc;
  int64_t mc, chunk, nchunks; /* rows per block; tiles per item, items per row block */
} job_t;

#define TILE(rows) tile(A, j->lda, rows, as, w->G, Bt, w->g8, zt, sct, xs, C, j->ldc, ncols, sym)

/* Rows [m0, m1) against tiles [t0, t1). */
static inline __attribute__((always_inline)) void run_tiles(const job_t* j, int64_t m0, int64_t m1,
                                                            int64_t t0, int64_t t1, int sym) {
  const u4_weight_t* w = j->w;
  const int64_t K8 = w->G * w->g8;
#if defined(MR_FEW)
  const int mr = j->M <= 2 * MR_FEW ? MR_FEW : MR;
#else
  const int mr = MR;
#endif
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* Bt = w->Bp + t * K8 * NR * 4;
    const int32_t* zt = w->zs + t * w->G * NR;
    const float* sct = w->sc + t * w->G * NR;
    const int64_t n0 = t * NR;
    const int64_t ncols = (w->N - n0) < NR ? (w->N - n0) : NR;
    for (int64_t m = m0; m < m1; m += mr) {
      const int rows = (m1 - m) < mr ? (int)(m1 - m) : mr;
      const int8_t* A = j->A + m * j->lda;
      const int32_t* as = j->asum + m * w->G;
      float* C = j->C + m * j->ldc + n0;
      const float* xs = j->xs + m;
      switch (rows) { /* constant row counts let the compiler unroll each case */
#if MR >= 8
        case 8: TILE(8); break;
        case 7: TILE(7); break;
#endif
#if MR >= 6
        case 6: TILE(6); break;
        case 5: TILE(5); break;
#endif
        case 4: TILE(4); break;
        case 3: TILE(3); break;
        case 2: TILE(2); break;
        default: TILE(1); break;
      }
    }
  }
}

/* Item i: row block i / nchunks against its chunk of tiles. Items go row block first, so the
   threads share one block's activations at a time, each streaming its tiles past them; the
   symmetric case is compiled on its own (no zero-point loads, no vpmulld). */
static void run_item(void* ctx, int slot, int64_t i) {
  (void)slot;
  const job_t* j = (const job_t*)ctx;
  const int64_t tiles = (j->w->N + NR - 1) / NR;
  const int64_t m0 = i / j->nchunks * j->mc, t0 = i % j->nchunks * j->chunk;
  const int64_t m1 = m0 + j->mc < j->M ? m0 + j->mc : j->M, t1 = t0 + j->chunk < tiles ? t0 + j->chunk : tiles;
  if (j->w->symmetric) run_tiles(j, m0, m1, t0, t1, 1);
  else run_tiles(j, m0, m1, t0, t1, 0);
}

#ifndef ITEMS_PER_THREAD
#define ITEMS_PER_THREAD 16
#endif
/* per row block: a thread stalled holding one delays the call by 1/16 of its share */
#define MIN_ITEM_TILES 2

/* C [M, N] (rows ldc apart) from codes A [M, lda], their group sums asum [M, G] and
   scales xs [M]; 0 (it cannot fail: the caller checked the shapes). */
int NAME(w4a8_u4_gemm)(const u4_weight_t* w, const int8_t* A, int64_t lda, int64_t M,
                       const int32_t* asum, const float* xs, float* C, int64_t ldc,
                       int nthreads) {
  const int64_t tiles = (w->N + NR - 1) / NR, K8 = w->G * w->g8;
  if (nthreads < 1) nthreads = 1;
  if (M <= 0) return 0;
  int64_t mc = A_BLOCK_BYTES / (K8 * 8) / MR * MR; /* a multiple of mr too */
  if (mc < MR) mc = MR;
  int64_t chunk = tiles; /* one thread: one item per row block */
  if (nthreads > 1) {
    chunk = (tiles + (int64_t)nthreads * ITEMS_PER_THREAD - 1) / ((int64_t)nthreads * ITEMS_PER_THREAD);
    if (chunk < MIN_ITEM_TILES) chunk = MIN_ITEM_TILES;
  }
  job_t j = {w, A, lda, M, asum, xs, C, ldc, mc, chunk, (tiles + chunk - 1) / chunk};
  while ((M + j.mc - 1) / j.mc * j.nchunks > SCHED_MAX_ITEMS) { /* a huge M: longer items */
    if (j.nchunks > 1) {
      j.chunk *= 2;
      j.nchunks = (tiles + j.chunk - 1) / j.chunk;
    } else {
      j.mc *= 2;
    }
  }
  const sched_work_t work = {run_item, NULL, NULL, &j};
  sched_run(&work, (M + j.mc - 1) / j.mc * j.nchunks, nthreads);
  return 0;
}

int NAME(w4a8_sched_test_stall)(int us) { sched_set_stall(us); return 0; }

int NAME(w4a8_u4_nr)(void) { return NR; }

typedef struct {
  const void* x; int is_bf16; int64_t M, K, ldx, g, gp; int8_t* codes; int64_t ld_out;
  int32_t* asum; float* scale; int64_t rows; /* per item */
  _Atomic int64_t first_bad; _Atomic int oom;
} quant_job_t;

static void quantize_item(void* ctx, int slot, int64_t i) {
  (void)slot;
  quant_job_t* q = (quant_job_t*)ctx;
  const int64_t G = q->K / q->g, m1 = (i + 1) * q->rows < q->M ? (i + 1) * q->rows : q->M;
  for (int64_t m = i * q->rows; m < m1; ++m) {
    float stack[4096];
    float* tmp = (q->is_bf16 && q->K > 4096) ? (float*)malloc((size_t)q->K * sizeof(float)) : stack;
    if (tmp == NULL) {
      __atomic_store_n(&q->oom, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (quantize_row(row_f32(q->x, q->is_bf16, m * q->ldx, q->K, tmp), q->K, q->g, q->gp,
                     q->codes + m * q->ld_out, q->asum ? q->asum + m * G : NULL, q->scale + m)) {
      int64_t seen = __atomic_load_n(&q->first_bad, __ATOMIC_RELAXED);
      while (m < seen && !__atomic_compare_exchange_n(&q->first_bad, &seen, m, 0, __ATOMIC_RELAXED,
                                                      __ATOMIC_RELAXED)) {
      }
    }
    if (tmp != stack) free(tmp);
  }
}

/* Rows shared among nthreads where there is enough work to pay for waking them: about
   1 ms on one thread at M = 128, K = 4096. */
static int quantize_rows_threads(const void* x, int is_bf16, int64_t M, int64_t K, int64_t ldx,
                                 int64_t g, int64_t gp, int8_t* codes, int64_t ld_out,
                                 int32_t* asum, float* scale, int nthreads) {
  if (M <= 1 || M * K < (1 << 16)) nthreads = 1;
  int64_t rows = nthreads > 1 ? (M + 8 * (int64_t)nthreads - 1) / (8 * (int64_t)nthreads) : M;
  if (rows < 1) rows = 1;
  while ((M + rows - 1) / rows > SCHED_MAX_ITEMS) rows *= 2;
  quant_job_t q = {x, is_bf16, M, K, ldx, g, gp, codes, ld_out, asum, scale, rows, M, 0};
  const sched_work_t work = {quantize_item, NULL, NULL, &q};
  sched_run(&work, M > 0 ? (M + rows - 1) / rows : 0, nthreads);
  if (q.first_bad < M) return (int)(-1 - q.first_bad);
  return q.oom; /* 1: no memory for a bf16 row's float32 copy */
}

/* as quantize_rows_threads, on the thread count torch set (its OpenMP runtime's) */
int NAME(quantize_rows_grouped)(const void* x, int is_bf16, int64_t M, int64_t K, int64_t ldx,
                                int64_t g, int64_t gp, int8_t* codes, int64_t ld_out,
                                int32_t* asum, float* scale) {
#if defined(_OPENMP)
  const int nthreads = omp_get_max_threads();
#else
  const int nthreads = 1;
#endif
  return quantize_rows_threads(x, is_bf16, M, K, ldx, g, gp, codes, ld_out, asum, scale, nthreads);
}

/*
 * The whole layer in one call: x [M, K] (float32, or bfloat16 bits when is_bf16; rows ldx
 * apart) quantized per token into a buffer of this call, then the GEMM into C [M, N].
 * Returns what quantize_rows_grouped returns (-1 - m: row m holds Inf or NaN; 1: out of
 * memory), else 0.
 */
int NAME(w4a8_u4_linear)(const u4_weight_t* w, const void* x, int is_bf16, int64_t M,
                         int64_t ldx, float* C, int64_t ldc, int nthreads) {
  /* rows 64 bytes longer than a multiple of 4 KiB: the kernel's MR rows then fall in
     different L1 sets instead of aliasing at 4 KiB strides */
  const int64_t lda = w->G * w->gp + 64;
  const size_t codes = (size_t)(M * lda), sums = (size_t)(M * w->G) * sizeof(int32_t);
  const size_t bytes = (codes + sums + (size_t)M * sizeof(float) + 63) / 64 * 64;
  int8_t* a = (int8_t*)aligned_alloc(64, bytes);
  if (a == NULL) return 1;
  int32_t* asum = (int32_t*)(a + codes); /* lda is a multiple of 4 */
  float* xs = (float*)(a + codes + sums);
  if (w->gp != w->g) memset(a, 0, codes); /* the zero codes padding each group */
  int rc = quantize_rows_threads(x, is_bf16, M, w->K, ldx, w->g, w->gp, a, lda, asum, xs, nthreads);
  if (rc == 0) rc = NAME(w4a8_u4_gemm)(w, a, lda, M, asum, xs, C, ldc, nthreads);
  free(a);
  return rc;
}
