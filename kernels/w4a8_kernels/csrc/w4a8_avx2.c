/*
 * W4A8 GEMM for x86 AVX2 (no VNNI needed): u8 activations x s8 weights, int32
 * accumulation per weight group, float32 group scales folded at each group's end.
 *
 *   C[m, n] = xs[m] * sum_g  s[n, g] * ( sum_{k in g} A[m, k] * B[n, k]  -  comp[n, g] )
 *
 * A   uint8 [M, lda]: the int8 activation codes plus 128 (the zero point that lets
 *     vpmaddubsw, which multiplies unsigned by signed bytes, run on signed data).
 * Bp  int8, N padded to 8 and K padded to 4, laid out [N/8][K/4][8 cols][4 k]: one
 *     32-byte load holds 8 columns x 4 consecutive k.
 * comp int32 [N/8][G][8]: 128 * sum_{k in g} B[n, k], removing the +128 shift.
 * sc  float [N/8][G][8]: weight scales, transposed for vector loads.
 *
 * vpmaddubsw sums pairs of u8*s8 into int16 with saturation; with |B| <= 15 a pair
 * is at most 2 * 255 * 15 = 7650, so it never saturates for int4 weights (the
 * caller checks the weight range). `ch` such results are first summed in int16
 * (|sum| <= 32640 for |B| <= 8 with ch = 8, <= 30600 for |B| <= 15 with ch = 4),
 * then widened with vpmaddwd into int32: the partial sums stay exact throughout.
 *
 * Threads share the N tiles in chunks taken dynamically (w4a8_sched.h), as w4a8_u4.c's:
 * a thread another process holds off its core costs the chunks it did not take, never a
 * wait at a barrier. A chunk's bits do not depend on the thread that runs it.
 */
#include <immintrin.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "w4a8_sched.h"

#define NR 8
#define MR 6

static inline __attribute__((always_inline)) void tile(
    const uint8_t* A, int64_t lda, int rows, const int8_t* Bt, const int32_t* compt,
    const float* sct, int64_t G, int64_t g4, int64_t ch, const float* xs, float* C,
    int64_t ldc, int64_t ncols) {
  __m256 facc[MR];
  for (int r = 0; r < MR; ++r) facc[r] = _mm256_setzero_ps();
  for (int64_t grp = 0; grp < G; ++grp) {
    __m256i acc[MR];
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_si256();
    int64_t k4 = grp * g4;
    const int64_t end = k4 + g4;
    const int8_t* bp = Bt + k4 * 32;
    while (k4 < end) {
      const int64_t len = (end - k4) < ch ? (end - k4) : ch;
      __m256i t[MR];
      for (int r = 0; r < MR; ++r) t[r] = _mm256_setzero_si256();
      for (int64_t s = 0; s < len; ++s, ++k4, bp += 32) {
        const __m256i b = _mm256_load_si256((const __m256i*)bp);
        for (int r = 0; r < rows; ++r) {
          int32_t a4;
          memcpy(&a4, A + r * lda + k4 * 4, 4);
          t[r] = _mm256_add_epi16(t[r], _mm256_maddubs_epi16(_mm256_set1_epi32(a4), b));
        }
      }
      const __m256i ones = _mm256_set1_epi16(1);
      for (int r = 0; r < rows; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(t[r], ones));
    }
    const __m256i c = _mm256_loadu_si256((const __m256i*)(compt + grp * NR));
    const __m256 sc = _mm256_loadu_ps(sct + grp * NR);
    for (int r = 0; r < rows; ++r)
      /* int32 -> float exact below 2**24; then the scale product and the running sum,
         in the float64 reference's order */
      facc[r] = _mm256_add_ps(facc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r], c)), sc));
  }
  for (int r = 0; r < rows; ++r) {
    float out[NR];
    _mm256_storeu_ps(out, _mm256_mul_ps(facc[r], _mm256_set1_ps(xs[r])));
    memcpy(C + r * ldc, out, sizeof(float) * (size_t)ncols);
  }
}

typedef struct {
  const uint8_t* A; int64_t lda, M, K4;
  const int8_t* Bp; const int32_t* comp; const float* sc; int64_t G, g4, ch;
  const float* xs; float* C; int64_t ldc, N;
  int64_t chunk; /* tiles per item */
} job_t;

/* Tiles [t0, t1) against every row. */
static void run_tiles(const job_t* j, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* Bt = j->Bp + t * j->K4 * 32;
    const int32_t* compt = j->comp + t * j->G * NR;
    const float* sct = j->sc + t * j->G * NR;
    const int64_t n0 = t * NR;
    const int64_t ncols = (j->N - n0) < NR ? (j->N - n0) : NR;
    for (int64_t m = 0; m < j->M; m += MR) {
      const int rows = (j->M - m) < MR ? (int)(j->M - m) : MR;
      const uint8_t* A = j->A + m * j->lda;
      float* C = j->C + m * j->ldc + n0;
      const float* xs = j->xs + m;
      switch (rows) { /* constant row counts let the compiler unroll each case */
        case 6: tile(A, j->lda, 6, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
        case 5: tile(A, j->lda, 5, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
        case 4: tile(A, j->lda, 4, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
        case 3: tile(A, j->lda, 3, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
        case 2: tile(A, j->lda, 2, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
        default: tile(A, j->lda, 1, Bt, compt, sct, j->G, j->g4, j->ch, xs, C, j->ldc, ncols); break;
      }
    }
  }
}

/* Item i: tiles [i chunk, (i + 1) chunk). */
static void run_item(void* ctx, int slot, int64_t i) {
  (void)slot;
  const job_t* j = (const job_t*)ctx;
  const int64_t tiles = (j->N + NR - 1) / NR, t0 = i * j->chunk;
  run_tiles(j, t0, t0 + j->chunk < tiles ? t0 + j->chunk : tiles);
}

/* as w4a8_u4.c: a thread stalled holding one item delays the call by 1/16 of its share */
#define ITEMS_PER_THREAD 16
#define MIN_ITEM_TILES 2

int w4a8_gemm_u8s8(const uint8_t* A, int64_t lda, int64_t M, int64_t K4, const int8_t* Bp,
                   const int32_t* comp, const float* sc, int64_t G, int64_t g4, int64_t ch,
                   const float* xs, float* C, int64_t ldc, int64_t N, int nthreads) {
  const int64_t tiles = (N + NR - 1) / NR;
  if (ch < 1 || ch > 8) return -2; /* int16 sums are exact only up to 8 (|B| <= 8) */
  if (nthreads < 1) nthreads = 1;
  if (M <= 0 || tiles <= 0) return 0;
  int64_t chunk = tiles; /* one thread: one item */
  if (nthreads > 1) {
    chunk = (tiles + (int64_t)nthreads * ITEMS_PER_THREAD - 1) / ((int64_t)nthreads * ITEMS_PER_THREAD);
    if (chunk < MIN_ITEM_TILES) chunk = MIN_ITEM_TILES;
  }
  while ((tiles + chunk - 1) / chunk > SCHED_MAX_ITEMS) chunk *= 2; /* a huge N: longer items */
  job_t j = {A, lda, M, K4, Bp, comp, sc, G, g4, ch, xs, C, ldc, N, chunk};
  const sched_work_t work = {run_item, NULL, NULL, &j};
  sched_run(&work, (tiles + chunk - 1) / chunk, nthreads);
  return 0;
}

/* every worker sleeps `us` after waking for a call, before it takes an item (a test) */
int w4a8_u8s8_sched_test_stall(int us) { sched_set_stall(us); return 0; }

int w4a8_avx2_abi_version(void) { return 3; }
