/*
 * W4A8 GEMM on packed int4 weights with AMX-INT8 tiles (tdpbssd: s8 x s8 -> int32):
 *
 *   C[m, n] = xs[m] * sum_g s[n, g] * sum_{k in g} (u[n, k] - z[n, g]) * a[m, k]
 *
 * the nibble u minus its zero point z (8 when symmetric) is formed while unpacking, so
 * no zero-point correction is left for the per-group epilogue.
 *
 * Bp   [N / 16][K64][16 rows][32 bytes]: byte j of row r in block kb holds the nibble of
 *      k = 64 kb + j (low) and k = 64 kb + 32 + j (high); each group is padded with zero
 *      nibbles to a multiple of 64 (gp), K64 = G * gp / 64. N is padded to 32.
 * Bt   int8 activation codes as AMX B tiles, [Mp / 16][K64][16 k-quads][16 m][4], Mp = M
 *      padded to 32 with zero codes (so padded weight columns, u - z != 0, add nothing).
 * zs, sc  int32 / float [N padded][G]: zero points (8 when symmetric), scales.
 *
 * A tile = 16 weight rows x 64 signed bytes (unpacked per 32 rows for the whole K
 * into a per-thread buffer, reused by every block of tokens of a chunk), B tile = 64 k x 16
 * tokens, C tile = 16 weight rows x 16 tokens of int32: each group's sum is exact in
 * int32 (the caller checks the group length), then scaled in float32 and summed in
 * group order, then multiplied by xs, as the float64 reference does.
 *
 * Threads share the work dynamically (w4a8_sched.h), as w4a8_u4.c's: an item is a chunk of
 * token blocks against a run of weight-row pairs, taken from one atomic counter, so a thread
 * another process holds off its core costs the items it did not take, never a wait at a
 * barrier. Each output block is written by the one item that computes it, from the same
 * sums in the same order whichever thread runs it: the bits do not depend on the threads.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "w4a8_quant.h"
#include "w4a8_sched.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Linux hands out the AMX register state only on request; 0 when granted. */
int w4a8_amx_init(void) { return (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); }

typedef struct {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg_t;

/* Every tile of this kernel: 16 rows of 64 bytes (palette 1). A constant in the library,
   never built on the stack: gcc 12's _tile_loadconfig tells the compiler it reads only a
   pointer's worth of memory, so at -O3 the stores that filled a local config were removed
   as dead and ldtilecfg loaded unset rows and columns (#GP, delivered as SIGSEGV). */
static const tilecfg_t TILECFG __attribute__((aligned(64))) = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* The 64 bytes ldtilecfg loads, for a test to read on any CPU (no AMX instruction runs). */
const void* w4a8_amx_tilecfg(void) { return &TILECFG; }

static void config_tiles(void) { _tile_loadconfig(&TILECFG); }

/* 32 weight rows (two 16-row blocks, the first n0) x all of K, unpacked to s8 A tiles
   [2][K64][16][64] holding u - z. */
static void unpack_rows(const uint8_t* bp, int64_t k64, int64_t kpg, const int32_t* zs,
                        int64_t G, int64_t n0, int8_t* abuf) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < 2; ++b) {
    const uint8_t* src = bp + b * k64 * 512;
    int8_t* dst = abuf + b * k64 * 1024;
    const int32_t* z = zs + (n0 + 16 * b) * G;
    for (int64_t kb = 0; kb < k64; ++kb, src += 512, dst += 1024) {
      const int64_t grp = kb / kpg;
      for (int r = 0; r < 16; r += 2) {
        const __m512i p = _mm512_loadu_si512((const void*)(src + r * 32));
        const __m512i lo = _mm512_and_si512(p, mask);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), mask);
        const __m512i z0 = _mm512_set1_epi8((char)z[r * G + grp]);
        const __m512i z1 = _mm512_set1_epi8((char)z[(r + 1) * G + grp]);
        _mm512_storeu_si512((void*)(dst + r * 64),
                            _mm512_sub_epi8(_mm512_shuffle_i64x2(lo, hi, 0x44), z0));
        _mm512_storeu_si512((void*)(dst + (r + 1) * 64),
                            _mm512_sub_epi8(_mm512_shuffle_i64x2(lo, hi, 0xEE), z1));
      }
    }
  }
}

/* The float epilogue runs per pair of groups: rows [r0, r1) of facc take group g's term,
   then group g + 1's (c1 NULL where g is the last), as (facc + t_g) + t_{g+1}: the same
   sums in the same order as one group at a time, with one facc load and store per pair.
   t = float(int32 sum) * scale, no fused multiply-add; the first group's term is the sum
   itself (0 + t is t). s: the scale of group g for row 0, rows G apart.
   This loop is what g128 adds over per-channel (M = 128, N = K = 4096: 0.25-0.3 ms, as
   long as it takes alone), and most of it is reading the sums back: with it empty g128
   took 0.80x the time, with only the loads of the stored C tiles 0.98-0.99x, with as many
   loads from a buffer no tile store wrote 0.92-0.93x (same-process A/B, M = 128 and 512).
   Measured here, tile loads and vector ops do not overlap (tile dots and vector ops do),
   and none of these made it cheaper: a transposed C (scales as vectors), 256-bit vectors,
   prefetching the tiles, padded buffers, an exact fused multiply-add on sums biased to
   float bits (the bias must be loaded into the C tiles, which cost more), a plain fused
   multiply-add (0.97-0.985x, other bits), an exact conversion by adding 2^23 + 2^22 to
   the sums' bits (it overlapped tile loads where vcvtdq2ps did not in a probe, but took
   1.04-1.06x the time here), passes of four groups (a ring of 8 C blocks:
   1.25x slower), a ring of 3, ring slots skewed off 4 KiB aliasing (1.14-1.2x slower),
   reading each group's sums a step later than now, or that and its loads placed before
   the step's tile stores, the streaming hint on the token tiles, or prefetching the packed
   weight during unpacking; operand tiles kept in L1 (a probe) sped per-channel as much.
   Nor did holding each group's four weight tiles for a pass of 2-8 blocks of 16 tokens
   (half the tile loads, but two C tiles, each two dots deep, where this loop keeps four
   in flight): 1.7-2.1x per-channel's time at M = 128 against this loop's 1.36-1.43
   (benchmarks/results/amx_emr_group_pass/). */
static inline void scale_rows(float (*facc)[32], int32_t (*c0)[32], int32_t (*c1)[32],
                              const float* s, int64_t G, int first, int r0, int r1) {
  for (int r = r0; r < r1; ++r) {
    const __m512 s0 = _mm512_set1_ps(s[r * G]);
    const __m512 s1 = _mm512_set1_ps(c1 ? s[r * G + 1] : 0.0f);
    for (int h = 0; h < 2; ++h) {
      __m512 acc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void*)&c0[r][16 * h])), s0);
      if (!first) acc = _mm512_add_ps(_mm512_loadu_ps(&facc[r][16 * h]), acc);
      if (c1)
        acc = _mm512_add_ps(acc, _mm512_mul_ps(
                                     _mm512_cvtepi32_ps(_mm512_load_si512((const void*)&c1[r][16 * h])), s1));
      _mm512_storeu_ps(&facc[r][16 * h], acc);
    }
  }
}

/* v[i] lane j -> v[j] lane i, for 16 vectors of 16 32-bit lanes: 32-bit, then 64-bit
   interleaves within 128-bit lanes (t[4i + j] lane L: column 4 L + j of rows 4i .. 4i + 3),
   then lanes gathered across rows. */
static inline void transpose16(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    v[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    v[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    v[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    v[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int jj = 0; jj < 4; ++jj) {
    const __m512i a = _mm512_shuffle_i32x4(v[jj], v[4 + jj], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(v[jj], v[4 + jj], 0xDD);
    const __m512i c = _mm512_shuffle_i32x4(v[8 + jj], v[12 + jj], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(v[8 + jj], v[12 + jj], 0xDD);
    t[jj] = _mm512_shuffle_i32x4(a, c, 0x88);
    t[8 + jj] = _mm512_shuffle_i32x4(a, c, 0xDD);
    t[4 + jj] = _mm512_shuffle_i32x4(b, d, 0x88);
    t[12 + jj] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
  for (int i = 0; i < 16; ++i) v[i] = t[i];
}

/* A 16 x 64-byte block of codes (16 rows ld bytes apart) as one B tile: quad q of row t to
   tile[q][t], 16 full-line stores. Storing a dword at a time across 16 lines made quantizing
   into tiles 2.4x slower (M = 128, K = 4096, 2 threads, an AVX-512 Xeon: 0.25 ms, now 0.11). */
static inline void tile_of_rows(const int8_t* rows, int64_t ld, int32_t* tile) {
  __m512i v[16];
  for (int t = 0; t < 16; ++t) v[t] = _mm512_loadu_si512((const void*)(rows + t * ld));
  transpose16(v);
  for (int q = 0; q < 16; ++q) _mm512_storeu_si512((void*)(tile + 16 * q), v[q]);
}

/* out[m, n0 + r] = facc[r][m - m0] * xs[m] for the block's real tokens m < M and columns
   n0 + r < N: one float32 product per output, as before, with the 32 x 32 block
   transposed in registers per 16 x 16 quarter (a scalar loop down facc's columns took
   over a quarter of the per-channel kernel's time at M = 128). */
static void write_out(float (*facc)[32], float* C, int64_t ldc, const float* xs, int64_t m0,
                      int64_t M, int64_t n0, int64_t N) {
  for (int cb = 0; cb < 2; ++cb) {
    const int64_t mb = m0 + 16 * cb, nm = M - mb < 16 ? M - mb : 16;
    if (nm <= 0) break;
    const __m512 x = _mm512_maskz_loadu_ps((__mmask16)((1u << nm) - 1), xs + mb);
    for (int rb = 0; rb < 2; ++rb) {
      const int64_t nc = N - n0 - 16 * rb < 16 ? N - n0 - 16 * rb : 16;
      if (nc <= 0) break;
      __m512i v[16];
      for (int i = 0; i < 16; ++i)
        v[i] = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(&facc[16 * rb + i][16 * cb]), x));
      transpose16(v);
      const __mmask16 cols = (__mmask16)((1u << nc) - 1);
      for (int k = 0; k < nm; ++k)
        _mm512_mask_storeu_ps(C + (mb + k) * ldc + n0 + 16 * rb, cols, _mm512_castsi512_ps(v[k]));
    }
  }
}

/* write_out on a 32 x 32 block facc (rows 32 floats apart), for a test on any CPU with
   AVX-512: it holds no AMX instruction. */
void w4a8_amx_write_out(const float* facc, float* C, int64_t ldc, const float* xs, int64_t m0,
                        int64_t M, int64_t n0, int64_t N) {
  write_out((float(*)[32])facc, C, ldc, xs, m0, M, n0, N);
}

/* Token blocks go in chunks whose B tiles stay in L2 while every weight pair of the
   thread passes over them, each pair unpacked again per chunk: in a single pass over
   all blocks, their B tiles (2 MiB at M = 512, K = 4096) came from beyond L2 for every
   pair. A block's B tiles take 2 k64 KiB. Measured here (L2 2 MiB a core): one pass is
   fastest while the tiles take up to 3/4 of L2 (M = 384 at K = 4096); past that, equal
   chunks of at most half of L2 (a short last chunk pays a whole unpack for few tokens;
   chunks of 1/4 of L2 were slower at M = 256, 3/4 at M = 768), but never fewer than 4
   blocks: at K = 14336 chunks of 2 made g128 7-11% slower (each pair's unpack, its
   weight bytes read again, then serves 2 blocks only), so there one pass stays.
   Prefetching the next pair's packed bytes to L2 during a pair's last block was 4-17%
   slower. So was K in slices for per-channel, each slice's weight tiles loaded once from L2
   and served from L1 to up to 4 token blocks, their sums kept in L1 between slices (slices
   of 8 or 16 steps, token tiles streamed or not; bit-identical): at M = 128, 1.05-1.08x the
   time, at 256 1.05-1.07x (benchmarks/results/amx_emr_kslice/). */
static int64_t chunk_blocks(int64_t blocks, int64_t k64) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 1 << 21;
  const int64_t bytes = 2 * k64 * 1024, most = l2 / 2 / bytes;
  if (blocks * bytes <= l2 / 4 * 3 || most < 4) return blocks ? blocks : 1;
  const int64_t chunks = (blocks + most - 1) / most;
  return (blocks + chunks - 1) / chunks;
}

typedef struct {
  const int8_t* Bt; int64_t Mp, M, G, kpg;
  const uint8_t* Bp; const int32_t* zs; const float* sc; const float* xs;
  float* C; int64_t ldc, N;
  int64_t chunk, nchunks; /* token blocks per chunk, chunks */
  int64_t run, nruns;     /* pairs per item, items per chunk */
  /* per thread (slot) of the call: its unpacked pair buffer, the pair it holds, -3 when
     it had no memory for the buffer */
  int8_t* abuf[SCHED_MAX_SLOTS];
  int64_t have[SCHED_MAX_SLOTS];
  int rc[SCHED_MAX_SLOTS];
} job_t;

/* A thread's first item of the call: its tile configuration (per thread) and buffer. */
static void enter_job(void* ctx, int slot) {
  job_t* j = (job_t*)ctx;
  j->abuf[slot] = (int8_t*)aligned_alloc(64, (size_t)(2 * j->G * j->kpg * 1024));
  j->have[slot] = -1;
  j->rc[slot] = j->abuf[slot] ? 0 : -3;
  config_tiles();
}

static void leave_job(void* ctx, int slot) {
  job_t* j = (job_t*)ctx;
  _tile_release();
  free(j->abuf[slot]);
  j->abuf[slot] = NULL;
}

/* Pair np (weight rows np * 32 ..) against token blocks [mc, mend).
   Step st runs group st's tile dots. Group st - 1's sums leave the C tiles one by one at
   the start of step st, each tile's store followed at once by group st's first dot into it
   (stored after a group's last dots, all four stores waited on those dots and the next
   group's dots on the stores: measured slower); they go to cbuf[(st - 1) % 4]. Between the
   dots runs half of the epilogue of the pair of groups stored before; the last pair has no
   dots left to share and runs whole. */
static void run_pair(const job_t* j, const int8_t* abuf, int64_t np, int64_t mc, int64_t mend) {
  const int64_t k64 = j->G * j->kpg, G = j->G, kpg = j->kpg;
  int32_t cbuf[4][32][32] __attribute__((aligned(64)));
  float facc[32][32];
  const int64_t steps = ((G + 1) / 2 + 1) * 2;
  const float* sc = j->sc + np * 32 * G;
  for (int64_t mp = mc; mp < mend; ++mp) {
    const int8_t* b0 = j->Bt + (2 * mp) * k64 * 1024;
    const int8_t* b1 = b0 + k64 * 1024;
    for (int64_t st = 0; st < steps; ++st) {
      /* the pair g, g + 1 whose epilogue takes rows r0 .. r0 + 15 in this step: in even
         steps the pair is (st - 2, st - 1), rows 0-15, which the first two stores of
         this step hold; in odd steps (st - 3, st - 2), stored in earlier steps */
      const int64_t g = st - 2 - (st & 1);
      const int pass = g >= 0 && g < G, r0 = (int)(st & 1) * 16;
      int32_t(*c0)[32] = cbuf[g & 3];
      int32_t(*c1)[32] = g + 1 < G ? cbuf[(g + 1) & 3] : NULL;
      int32_t(*pb)[32] = cbuf[(st - 1) & 3];
      if (st >= G) {
        if (st == G) {
          _tile_stored(0, &pb[0][0], 128);
          _tile_stored(1, &pb[0][16], 128);
          _tile_stored(2, &pb[16][0], 128);
          _tile_stored(3, &pb[16][16], 128);
        }
        if (pass) scale_rows(facc, c0, c1, sc + g, G, g == 0, r0, r0 + 16);
        continue;
      }
      for (int64_t i = 0; i < kpg; ++i) {
        const int64_t kb = st * kpg + i;
        const int first = i == 0, store = first && st > 0;
        /* the half pass's 16 rows spread over the step's 2 kpg pairs of dots */
        const int ra = r0 + (int)(16 * i / kpg), rm = r0 + (int)((16 * i + 8) / kpg),
                  rb = r0 + (int)(16 * (i + 1) / kpg);
        /* the hint not to keep the weight tiles in L1 (re-read from L2 per token block
           anyway): measured faster */
        if (store) _tile_stored(0, &pb[0][0], 128);
        if (first) _tile_zero(0);
        _tile_stream_loadd(4, abuf + kb * 1024, 64);
        _tile_loadd(6, b0 + kb * 1024, 64);
        _tile_dpbssd(0, 4, 6);
        if (store) _tile_stored(1, &pb[0][16], 128);
        if (first) _tile_zero(1);
        _tile_loadd(7, b1 + kb * 1024, 64);
        _tile_dpbssd(1, 4, 7);
        if (pass) scale_rows(facc, c0, c1, sc + g, G, g == 0, ra, rm);
        if (store) _tile_stored(2, &pb[16][0], 128);
        if (first) _tile_zero(2);
        _tile_stream_loadd(5, abuf + (k64 + kb) * 1024, 64);
        _tile_dpbssd(2, 5, 6);
        if (store) _tile_stored(3, &pb[16][16], 128);
        if (first) _tile_zero(3);
        _tile_dpbssd(3, 5, 7);
        if (pass) scale_rows(facc, c0, c1, sc + g, G, g == 0, rm, rb);
      }
    }
    write_out(facc, j->C, j->ldc, j->xs, mp * 32, j->M, np * 32, j->N);
  }
}

/* Item i: token chunk c = i / nruns against run r of pairs. Items go chunk first, so the
   threads share one chunk's B tiles at a time (in L2), each unpacking its pairs past them.
   Odd chunks take the runs and the pairs in them backwards: one thread alone then starts
   each chunk on the pair it unpacked last, as the static split did. */
static void run_item(void* ctx, int slot, int64_t i) {
  job_t* j = (job_t*)ctx;
  if (j->rc[slot]) return; /* no buffer: the call returns -3 */
  const int64_t pairs = (j->N + 31) / 32, k64 = j->G * j->kpg, blocks = j->Mp / 32;
  const int64_t c = i / j->nruns, back = c & 1, r = back ? j->nruns - 1 - i % j->nruns : i % j->nruns;
  const int64_t mc = c * j->chunk, mend = mc + j->chunk < blocks ? mc + j->chunk : blocks;
  const int64_t p0 = r * j->run, p1 = p0 + j->run < pairs ? p0 + j->run : pairs;
  for (int64_t q = 0; q < p1 - p0; ++q) {
    const int64_t np = back ? p1 - 1 - q : p0 + q;
    if (np != j->have[slot])
      unpack_rows(j->Bp + np * 2 * k64 * 512, k64, j->kpg, j->zs, j->G, np * 32, j->abuf[slot]);
    j->have[slot] = np;
    run_pair(j, j->abuf[slot], np, mc, mend);
  }
}

/* as w4a8_u4.c: a thread stalled holding one item delays the call by 1/16 of its share */
#define ITEMS_PER_THREAD 16

int w4a8_amx_gemm(const int8_t* Bt, int64_t Mp, int64_t M, int64_t G,
                  int64_t kpg, const uint8_t* Bp, const int32_t* zs, const float* sc,
                  const float* xs, float* C, int64_t ldc, int64_t N, int nthreads) {
  const int64_t pairs = (N + 31) / 32, blocks = Mp / 32;
  if (Mp % 32) return -2;
  if (nthreads < 1) nthreads = 1;
  if (blocks <= 0 || pairs <= 0) return 0;
  job_t j; /* 1.3 KiB of per-slot state: on the caller's stack, as concurrent calls need */
  j.Bt = Bt; j.Mp = Mp; j.M = M; j.G = G; j.kpg = kpg; j.Bp = Bp; j.zs = zs; j.sc = sc;
  j.xs = xs; j.C = C; j.ldc = ldc; j.N = N;
  j.chunk = chunk_blocks(blocks, G * kpg);
  j.nchunks = (blocks + j.chunk - 1) / j.chunk;
  /* one thread: one item per chunk, in the static split's order; more: runs of pairs,
     ITEMS_PER_THREAD a chunk per thread (a pair's unpack reads its weight bytes once a
     chunk whichever thread takes it) */
  j.run = pairs;
  if (nthreads > 1)
    j.run = (pairs + (int64_t)nthreads * ITEMS_PER_THREAD - 1) / ((int64_t)nthreads * ITEMS_PER_THREAD);
  j.nruns = (pairs + j.run - 1) / j.run;
  while (j.nchunks * j.nruns > SCHED_MAX_ITEMS) { /* a huge N: longer runs */
    j.run *= 2;
    j.nruns = (pairs + j.run - 1) / j.run;
  }
  for (int i = 0; i < SCHED_MAX_SLOTS; ++i) j.rc[i] = 0;
  const sched_work_t work = {run_item, enter_job, leave_job, &j};
  sched_run(&work, j.nchunks * j.nruns, nthreads);
  int rc = 0;
  for (int i = 0; i < SCHED_MAX_SLOTS; ++i)
    if (j.rc[i]) rc = j.rc[i];
  return rc;
}

typedef struct { const int32_t* a; int64_t lda4, k64; int32_t* bt; } tiles_job_t;

/* Token block mb (16 rows of codes) as B tiles: bt[mb][kb][q][t] = a[16 mb + t][16 kb + q]
   in 4-byte quads, a 16 x 16 transpose per 64 bytes of K. */
static void tiles_item(void* ctx, int slot, int64_t mb) {
  (void)slot;
  const tiles_job_t* j = (const tiles_job_t*)ctx;
  const int8_t* a = (const int8_t*)(j->a + mb * 16 * j->lda4);
  int32_t* bt = j->bt + mb * j->k64 * 256;
  for (int64_t kb = 0; kb < j->k64; ++kb) tile_of_rows(a + kb * 64, j->lda4 * 4, bt + kb * 256);
}

/* The int8 codes a [Mp][K] (rows lda bytes apart; Mp and K multiples of 16 and 64) laid out as
   the GEMM's B tiles, on this library's own pool: a torch copy here woke torch's OpenMP
   threads between this pool's calls, and the two pools fought over the cores (AMX host,
   2 threads, M = 128: the whole call 3.5 ms, the GEMM in it 1.3 ms). */
int w4a8_amx_tiles(const int8_t* a, int64_t lda, int64_t Mp, int64_t K, int8_t* bt, int nthreads) {
  if (Mp % 16 || K % 64 || lda % 4) return -2;
  tiles_job_t j = {(const int32_t*)a, lda / 4, K / 64, (int32_t*)bt};
  const sched_work_t work = {tiles_item, NULL, NULL, &j};
  sched_run(&work, Mp / 16, nthreads < 1 ? 1 : nthreads);
  return 0;
}

typedef struct {
  const void* x; int is_bf16; int64_t M, K, ldx, g, gp, k64; int32_t* bt; float* xs;
  _Atomic int64_t first_bad; _Atomic int oom;
} qtiles_job_t;

/* Token block mb: its 16 rows quantized (w4a8_quant.h's bits, group pads zero) into a
   row-major block buffer, then laid out as the block's B tiles; rows at or past M are zero
   codes. */
static void qtiles_item(void* ctx, int slot, int64_t mb) {
  (void)slot;
  qtiles_job_t* j = (qtiles_job_t*)ctx;
  const int64_t kp = j->k64 * 64;
  float fstack[4096];
  int8_t* blk = (int8_t*)malloc((size_t)(16 * kp));
  float* tmp = (j->is_bf16 && j->K > 4096) ? (float*)malloc((size_t)j->K * sizeof(float)) : fstack;
  int32_t* bt = j->bt + mb * j->k64 * 256;
  if (blk == NULL || tmp == NULL) {
    __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
    memset(bt, 0, (size_t)kp * 16); /* no stale codes either way */
  } else {
    for (int t = 0; t < 16; ++t) {
      const int64_t m = mb * 16 + t;
      int8_t* row = blk + t * kp;
      if (j->gp != j->g || m >= j->M) memset(row, 0, (size_t)kp);
      if (m < j->M && quantize_row(row_f32(j->x, j->is_bf16, m * j->ldx, j->K, tmp), j->K, j->g,
                                   j->gp, row, NULL, j->xs + m)) {
        int64_t seen = __atomic_load_n(&j->first_bad, __ATOMIC_RELAXED);
        while (m < seen && !__atomic_compare_exchange_n(&j->first_bad, &seen, m, 0,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
      }
    }
    for (int64_t kb = 0; kb < j->k64; ++kb) tile_of_rows(blk + kb * 64, kp, bt + kb * 256);
  }
  free(blk);
  if (tmp != fstack) free(tmp);
}

/* x [M, K] (float32, or bfloat16 bits when is_bf16; rows ldx apart) quantized per token
   straight into the GEMM's B tiles bt [Mp / 16][G * gp / 64][16][16][4] (Mp a multiple of
   16, at least M) and its scales xs [M], on this library's pool: the codes never take a
   row-major detour, and no second pool (the u4 library's quantizer) wakes beside this one.
   Returns -1 - m for the first row m holding Inf or NaN, 1 where memory ran out, 4 for a
   bad shape, else 0. */
int w4a8_amx_quantize_tiles(const void* x, int is_bf16, int64_t M, int64_t K, int64_t ldx,
                            int64_t g, int64_t gp, int64_t Mp, int8_t* bt, float* xs,
                            int nthreads) {
  if (Mp % 16 || Mp < M || g <= 0 || K % g || gp % 64 || gp < g) return 4;
  qtiles_job_t j = {x, is_bf16, M, K, ldx, g, gp, (K / g) * gp / 64, (int32_t*)bt, xs, M, 0};
  /* as the row quantizer: threads only where the rows pay for waking them */
  if (M * K < (1 << 16)) nthreads = 1;
  const sched_work_t work = {qtiles_item, NULL, NULL, &j};
  sched_run(&work, Mp / 16, nthreads < 1 ? 1 : nthreads);
  if (j.first_bad < M) return (int)(-1 - j.first_bad);
  return j.oom;
}

/* The whole layer in one call, on one pool: x quantized into B tiles (above), then the
   GEMM into C [M, N]. Returns what w4a8_amx_quantize_tiles returns, else the GEMM's code
   made positive (2: M padding, 3: no unpack buffer), so a negative code is always a row. */
int w4a8_amx_linear(const void* x, int is_bf16, int64_t M, int64_t K, int64_t ldx, int64_t g,
                    int64_t gp, const uint8_t* Bp, const int32_t* zs, const float* sc,
                    float* C, int64_t ldc, int64_t N, int nthreads) {
  if (g <= 0 || K % g) return 4; /* before K / g below */
  const int64_t Mp = (M + 31) / 32 * 32, kp = (K / g) * gp;
  const size_t tiles = (size_t)(Mp * kp), bytes = (tiles + (size_t)M * sizeof(float) + 63) / 64 * 64;
  int8_t* bt = (int8_t*)aligned_alloc(64, bytes);
  if (bt == NULL) return 1;
  float* xs = (float*)(bt + tiles);
  int rc = w4a8_amx_quantize_tiles(x, is_bf16, M, K, ldx, g, gp, Mp, bt, xs, nthreads);
  if (rc == 0) rc = -w4a8_amx_gemm(bt, Mp, M, K / g, gp / 64, Bp, zs, sc, xs, C, ldc, N, nthreads);
  free(bt);
  return rc;
}

/* every worker sleeps `us` after waking for a call, before it takes an item (a test) */
int w4a8_amx_sched_test_stall(int us) { sched_set_stall(us); return 0; }
