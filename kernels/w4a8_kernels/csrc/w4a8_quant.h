/*
 * Dynamic per-token int8 quantization, shared by every C engine that includes it (each
 * library keeps its own static copy and runs it on its own thread pool, w4a8_sched.h, so a
 * call's quantization and GEMM wake one pool). AVX-512 where the build has it, else AVX2:
 * the same bits either way (every step below is exact or rounds as the scalar loop does).
 */
#ifndef W4A8_QUANT_H
#define W4A8_QUANT_H

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define Q_VW 16
typedef __m512i q_vi;
typedef __m512 q_vf;
#define Q_FSET1(x) _mm512_set1_ps(x)
#define Q_FMUL(a, b) _mm512_mul_ps(a, b)
#define Q_FADD(a, b) _mm512_add_ps(a, b)
#define Q_FLOADU(p) _mm512_loadu_ps(p)
#define Q_ADD32(a, b) _mm512_add_epi32(a, b)
#define Q_SET1_32(x) _mm512_set1_epi32(x)
#define Q_ZERO() _mm512_setzero_si512()
#else
#define Q_VW 8
typedef __m256i q_vi;
typedef __m256 q_vf;
#define Q_FSET1(x) _mm256_set1_ps(x)
#define Q_FMUL(a, b) _mm256_mul_ps(a, b)
#define Q_FADD(a, b) _mm256_add_ps(a, b)
#define Q_FLOADU(p) _mm256_loadu_ps(p)
#define Q_ADD32(a, b) _mm256_add_epi32(a, b)
#define Q_SET1_32(x) _mm256_set1_epi32(x)
#define Q_ZERO() _mm256_setzero_si256()
#endif

/*
 * Dynamic per-token int8 quantization into a kernel's activation layout (every C engine
 * takes its codes from here), the same bits as kernels.quant.quantize_per_token_int8:
 * amax = max(max |x|, 1e-10f), scale = amax / 127, inv = (1 / amax) * 127, code =
 * round(x * inv) with ties away from zero, all in float32. Code k of row m goes to
 * codes[m * ld_out + (k / g) * gp + k % g] (the pads are left as the caller zeroed
 * them); asum[m * G + k / g] gets each group's code sum, unless asum is NULL (engines
 * without a zero-point correction read none; at K = 4096, g = 128 the sums were 15% of
 * the quantizer's time). x is float32 (is_bf16 = 0) or bfloat16 bits, rows ldx apart,
 * columns one element apart. Returns -1 - m for the first row m holding Inf or NaN, 1
 * where memory ran out, else 0.
 */
/* Row m's float32 values (bf16 widened; exact), so the loops below see one type: max and
   the code rounding are exact, so their order changes no bit. The widening is intrinsics,
   not a loop left to the compiler: Ubuntu's gcc 13.3 (_FORTIFY_SOURCE=3 by default) left
   the loop's per-element memcpy scalar, and quantizing 128 x 4096 bf16 rows into AMX tiles
   took 1.8 ms on one thread (0.13 ms with the hardening defaults off, 0.22 ms now; float32
   rows 0.17-0.23): benchmarks/results/amx_emr_quantizer/. */
static inline const float* row_f32(const void* x, int is_bf16, int64_t base, int64_t K,
                                   float* tmp) {
  if (!is_bf16) return (const float*)x + base;
  const uint16_t* b = (const uint16_t*)x + base;
  int64_t k = 0;
#if defined(__AVX512F__)
  for (; k + 16 <= K; k += 16)
    _mm512_storeu_si512((void*)(tmp + k),
                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(b + k))), 16));
#else
  for (; k + 8 <= K; k += 8)
    _mm256_storeu_si256((__m256i*)(tmp + k),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(b + k))), 16));
#endif
  for (; k < K; ++k) { /* a union, not memcpy: fortified, that was a call per element */
    const union { uint32_t u; float f; } v = {(uint32_t)b[k] << 16};
    tmp[k] = v.f;
  }
  return tmp;
}

/* The codes of xg[0, Q_VW * (g / Q_VW)) and their sum (0 unless want_sum), *done the count:
   the scalar loop's operations (round to nearest ties away as floor(|v| + half_below)
   with v's sign), one vector of columns at a time; the codes are whole numbers in
   [-127, 127], so every conversion is exact and the integer sum's order changes nothing. */
static inline int32_t codes_vec(const float* xg, int64_t g, float inv, int8_t* o, int64_t* done,
                                int want_sum) {
  const q_vf vinv = Q_FSET1(inv), half_below = Q_FSET1(0.49999997f);
  q_vi sum = Q_ZERO();
  int64_t j = 0;
  for (; j + Q_VW <= g; j += Q_VW) {
    const q_vf v = Q_FMUL(Q_FLOADU(xg + j), vinv);
#if defined(__AVX512F__)
    const q_vi sign = _mm512_and_si512(_mm512_castps_si512(v), Q_SET1_32(INT32_MIN));
    const q_vf mag = _mm512_castsi512_ps(_mm512_andnot_si512(Q_SET1_32(INT32_MIN), _mm512_castps_si512(v)));
    const q_vf fl = _mm512_roundscale_ps(Q_FADD(mag, half_below), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const q_vi c = _mm512_cvttps_epi32(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(fl), sign)));
    _mm_storeu_si128((__m128i*)(o + j), _mm512_cvtepi32_epi8(c));
#else
    const q_vf signbit = _mm256_set1_ps(-0.0f);
    const q_vf fl = _mm256_floor_ps(Q_FADD(_mm256_andnot_ps(signbit, v), half_below));
    const q_vi c = _mm256_cvttps_epi32(_mm256_or_ps(fl, _mm256_and_ps(v, signbit)));
    const q_vi b = _mm256_packs_epi16(_mm256_packs_epi32(c, c), Q_ZERO()); /* codes 0-3, 4-7 per lane */
    _mm_storel_epi64((__m128i*)(o + j), _mm_unpacklo_epi32(_mm256_castsi256_si128(b),
                                                           _mm256_extracti128_si256(b, 1)));
#endif
    sum = Q_ADD32(sum, c);
  }
  *done = j;
  if (!want_sum) return 0;
  int32_t lanes[Q_VW];
  memcpy(lanes, &sum, sizeof(lanes));
  int32_t s = 0;
  for (int i = 0; i < Q_VW; ++i) s += lanes[i];
  return s;
}

/* max |x[k]| over the row into *amax; 1 where the row holds Inf or NaN. Four independent
   max chains: with one (the compiler's simd reduction) each step waited on the last max,
   30% of the time of quantizing into AMX tiles (M = 128, K = 4096, an AVX-512 Xeon: 0.11 ms
   at 2 threads, now 0.077). max is exact, so the order changes no bit. */
static inline int row_absmax(const float* xr, int64_t K, float* amax) {
  const float big = 3.4028234663852886e38f;
  int64_t k = 0;
  int bad = 0;
  float m = 0.0f;
#if defined(__AVX512F__)
  const __m512 vbig = _mm512_set1_ps(big);
  __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __mmask16 nf = 0;
  for (; k + 64 <= K; k += 64)
    for (int u = 0; u < 4; ++u) {
      const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xr + k + 16 * u));
      nf |= _mm512_cmp_ps_mask(a, vbig, _CMP_NLE_UQ); /* Inf and NaN */
      c[u] = _mm512_max_ps(c[u], a);
    }
  bad = nf != 0;
  m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(c[0], c[1]), _mm512_max_ps(c[2], c[3])));
#else
  const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), vbig = _mm256_set1_ps(big);
  __m256 c[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int nf = 0;
  for (; k + 32 <= K; k += 32)
    for (int u = 0; u < 4; ++u) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xr + k + 8 * u), mag);
      nf |= _mm256_movemask_ps(_mm256_cmp_ps(a, vbig, _CMP_NLE_UQ)); /* Inf and NaN */
      c[u] = _mm256_max_ps(c[u], a);
    }
  bad = nf != 0;
  const __m256 c4 = _mm256_max_ps(_mm256_max_ps(c[0], c[1]), _mm256_max_ps(c[2], c[3]));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(c4), _mm256_extractf128_ps(c4, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  m = _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
#endif
  for (; k < K; ++k) {
    const float a = __builtin_fabsf(xr[k]);
    bad |= !(a <= big);
    m = a > m ? a : m;
  }
  *amax = m;
  return bad;
}

/* One row; 1 where it holds Inf or NaN (nothing written then). */
static int quantize_row(const float* xr, int64_t K, int64_t g, int64_t gp, int8_t* out,
                        int32_t* asum, float* scale) {
  const float half_below = 0.49999997f; /* 0.5 - 2**-25 */
  float amax;
  if (row_absmax(xr, K, &amax)) return 1;
  if (amax < 1e-10f) amax = 1e-10f;
  *scale = amax / 127.0f;
  const float inv = (1.0f / amax) * 127.0f;
  for (int64_t grp = 0; grp < K / g; ++grp) {
    const float* xg = xr + grp * g;
    int8_t* o = out + grp * gp;
    int64_t j = 0;
    /* the compiler leaves this loop scalar */
    int32_t s = codes_vec(xg, g, inv, o, &j, asum != NULL);
    for (; j < g; ++j) {
      const float v = xg[j] * inv;
      const float r = __builtin_copysignf(__builtin_floorf(__builtin_fabsf(v) + half_below), v);
      o[j] = (int8_t)r;
      s += (int32_t)r;
    }
    if (asum) asum[grp] = s;
  }
  return 0;
}

#endif
