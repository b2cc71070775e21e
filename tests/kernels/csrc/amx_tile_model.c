/*
 * w4a8_amx.c built over a scalar model of the AMX tile instructions it uses, so its loops,
 * layouts and epilogue run on a CPU without AMX (AVX-512 is still needed: the rest of the
 * engine is AVX-512 intrinsics). What it proves is the C around the tiles; that the tile
 * instructions behave as modelled is proven only on an AMX CPU.
 *
 * The model follows the instruction set reference: 8 tiles of 16 rows x 64 bytes per thread
 * (palette 1); TDPBSSD C[m][n] += sum over k < 16, j < 4 of A[m][4k + j] * B[k][4n + j]
 * (s8 x s8, int32 wrap-around sums); loads and stores move 16 rows of 64 bytes `stride`
 * bytes apart. A configuration other than the engine's 16 x 64 tiles aborts, as the CPU
 * raises #GP on one it cannot load.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static __thread uint8_t tmm[8][16][64];
static __thread int configured;

static void model_loadconfig(const void* p) {
  const uint8_t* c = (const uint8_t*)p;
  if (c[0] != 1) abort();
  for (int t = 0; t < 8; ++t) {
    uint16_t colsb;
    memcpy(&colsb, c + 16 + 2 * t, 2);
    if (colsb != 64 || c[48 + t] != 16) abort();
  }
  configured = 1;
}

static void model_load(int t, const void* base, long stride) {
  if (!configured) abort();
  for (int r = 0; r < 16; ++r) memcpy(tmm[t][r], (const uint8_t*)base + r * stride, 64);
}

static void model_store(int t, void* base, long stride) {
  if (!configured) abort();
  for (int r = 0; r < 16; ++r) memcpy((uint8_t*)base + r * stride, tmm[t][r], 64);
}

static void model_dpbssd(int c, int a, int b) {
  if (!configured || c == a || c == b || a == b) abort();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      int32_t acc;
      memcpy(&acc, &tmm[c][m][4 * n], 4);
      uint32_t sum = (uint32_t)acc;
      for (int k = 0; k < 16; ++k)
        for (int j = 0; j < 4; ++j)
          sum += (uint32_t)((int32_t)(int8_t)tmm[a][m][4 * k + j] * (int8_t)tmm[b][k][4 * n + j]);
      acc = (int32_t)sum;
      memcpy(&tmm[c][m][4 * n], &acc, 4);
    }
}

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_dpbssd
#define _tile_loadconfig(p) model_loadconfig(p)
#define _tile_release() (configured = 0)
#define _tile_zero(t) memset(tmm[t], 0, sizeof tmm[t])
#define _tile_loadd(t, p, s) model_load(t, p, s)
#define _tile_stream_loadd(t, p, s) model_load(t, p, s)
#define _tile_stored(t, p, s) model_store(t, p, s)
#define _tile_dpbssd(c, a, b) model_dpbssd(c, a, b)

#include "w4a8_amx.c"
