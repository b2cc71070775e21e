/*
 * W4A8 GEMM for x86 AVX2 (no VNNI needed): u8 activations x s8 weights, int32
 * accumulation per weight group, float32 group scales folded at each group's end.
 *
 *   C[m, n] = xs[m] * sum_g  s[n, g] * ( sum_{k in g} A[m, k] * B[n, k]  -  comp[n, g] )
 *
 * A   uint8 [M, lda]: the int8 activation codes plus 128 (the zero point that lets
 *     vpmaddubsw, which multiplies unsigned by signed bytes, run on signed data).
 * Bp  int8, N padded to 16 and K padded to 4, laid out [N/16][K/4][16 cols][4 k] so one
 *     32-byte load holds 8 columns x 4 consecutive k (two loads per 16-column tile).
 * comp int32 [N/16][G][16]: 128 * sum_{k in g} B[n, k], removing the +128 shift.
 * sc  float [N/16][G][16]: weight scales, transposed for vector loads.
 *
 * vpmaddubsw sums pairs of u8*s8 into int16 with saturation; with |B| <= 15 a pair
 * is at most 2 * 255 * 15 = 7650, so it never saturates for int4 weights (the
 * caller checks the weight range). Partial sums stay exact in int32.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define NR 16
#define MR 4

static inline __attribute__((always_inline)) void tile(
    const uint8_t* A, int64_t lda, int rows, int64_t K4, const int8_t* Bt,
    const int32_t* compt, const float* sct, int64_t G, int64_t g4, const float* xs,
    float* C, int64_t ldc, int64_t ncols) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 facc[MR][2];
  for (int r = 0; r < MR; ++r) { facc[r][0] = _mm256_setzero_ps(); facc[r][1] = _mm256_setzero_ps(); }
  for (int64_t grp = 0; grp < G; ++grp) {
    __m256i acc[MR][2];
    for (int r = 0; r < MR; ++r) { acc[r][0] = _mm256_setzero_si256(); acc[r][1] = _mm256_setzero_si256(); }
    const int64_t k4_begin = grp * g4;
    const int8_t* bp = Bt + k4_begin * 64;
    for (int64_t k4 = k4_begin; k4 < k4_begin + g4; ++k4, bp += 64) {
      const __m256i b0 = _mm256_load_si256((const __m256i*)bp);
      const __m256i b1 = _mm256_load_si256((const __m256i*)(bp + 32));
      for (int r = 0; r < rows; ++r) {
        int32_t a4;
        memcpy(&a4, A + r * lda + k4 * 4, 4);
        const __m256i a = _mm256_set1_epi32(a4);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones));
      }
    }
    const __m256i c0 = _mm256_loadu_si256((const __m256i*)(compt + grp * NR));
    const __m256i c1 = _mm256_loadu_si256((const __m256i*)(compt + grp * NR + 8));
    const __m256 s0 = _mm256_loadu_ps(sct + grp * NR);
    const __m256 s1 = _mm256_loadu_ps(sct + grp * NR + 8);
    for (int r = 0; r < rows; ++r) {
      /* one rounding per group (int32 -> float exact below 2**24, then the scale
         product and the running float sum), as in the float64 reference's order */
      facc[r][0] = _mm256_add_ps(facc[r][0], _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][0], c0)), s0));
      facc[r][1] = _mm256_add_ps(facc[r][1], _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][1], c1)), s1));
    }
  }
  for (int r = 0; r < rows; ++r) {
    const __m256 x = _mm256_set1_ps(xs[r]);
    float out[NR];
    _mm256_storeu_ps(out, _mm256_mul_ps(facc[r][0], x));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(facc[r][1], x));
    memcpy(C + r * ldc, out, sizeof(float) * (size_t)ncols);
  }
}

typedef struct {
  const uint8_t* A; int64_t lda, M, K4;
  const int8_t* Bp; const int32_t* comp; const float* sc; int64_t G, g4;
  const float* xs; float* C; int64_t ldc, N;
  int64_t tile_begin, tile_end;
} job_t;

static void run_tiles(const job_t* j) {
  for (int64_t t = j->tile_begin; t < j->tile_end; ++t) {
    const int8_t* Bt = j->Bp + t * j->K4 * 64;
    const int32_t* compt = j->comp + t * j->G * NR;
    const float* sct = j->sc + t * j->G * NR;
    const int64_t n0 = t * NR;
    const int64_t ncols = (j->N - n0) < NR ? (j->N - n0) : NR;
    for (int64_t m = 0; m < j->M; m += MR) {
      const int rows = (j->M - m) < MR ? (int)(j->M - m) : MR;
      const uint8_t* A = j->A + m * j->lda;
      float* C = j->C + m * j->ldc + n0;
      switch (rows) { /* constant row counts let the compiler unroll each case */
        case 4: tile(A, j->lda, 4, j->K4, Bt, compt, sct, j->G, j->g4, j->xs + m, C, j->ldc, ncols); break;
        case 3: tile(A, j->lda, 3, j->K4, Bt, compt, sct, j->G, j->g4, j->xs + m, C, j->ldc, ncols); break;
        case 2: tile(A, j->lda, 2, j->K4, Bt, compt, sct, j->G, j->g4, j->xs + m, C, j->ldc, ncols); break;
        default: tile(A, j->lda, 1, j->K4, Bt, compt, sct, j->G, j->g4, j->xs + m, C, j->ldc, ncols); break;
      }
    }
  }
}

static void* thread_main(void* arg) { run_tiles((const job_t*)arg); return NULL; }

int w4a8_gemm_u8s8(const uint8_t* A, int64_t lda, int64_t M, int64_t K4, const int8_t* Bp,
                   const int32_t* comp, const float* sc, int64_t G, int64_t g4,
                   const float* xs, float* C, int64_t ldc, int64_t N, int nthreads) {
  const int64_t tiles = (N + NR - 1) / NR;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > 64) nthreads = 64;
  if (nthreads > tiles) nthreads = (int)tiles;
  job_t jobs[64];
  pthread_t th[64];
  for (int i = 0; i < nthreads; ++i) {
    job_t j = {A, lda, M, K4, Bp, comp, sc, G, g4, xs, C, ldc, N,
               tiles * i / nthreads, tiles * (i + 1) / nthreads};
    jobs[i] = j;
  }
  int started[64] = {0};
  for (int i = 1; i < nthreads; ++i)
    started[i] = pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0;
  run_tiles(&jobs[0]);
  for (int i = 1; i < nthreads; ++i) {
    if (started[i]) pthread_join(th[i], NULL);
    else run_tiles(&jobs[i]); /* no thread to spare: do its share here */
  }
  return 0;
}

int w4a8_avx2_abi_version(void) { return 1; }
