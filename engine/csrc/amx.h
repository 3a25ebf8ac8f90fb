/* What the AMX kernels share (gemm_amx.c, attention_pairs.c): the tile configuration. Included only
 * where the compiler targets AMX (every CPU with AMX has AVX512-BF16: vec.h's store_bf16). */
#ifndef BATCHSCOPE_AMX_H
#define BATCHSCOPE_AMX_H
#include <immintrin.h>

#include "batchscope.h"
#include "vec.h"

/* LDTILECFG's 64-byte operand (palette 1). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

/* Tiles 0-7 of 64-byte rows, tile t with rows[t] rows (0 -> 1: an unused tile still needs a shape). */
static inline void configure_tiles(const int rows[8]) {
    TileConfig cfg = {0};
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = rows[t] ? rows[t] : 1, cfg.colsb[t] = 64;
    /* Not GCC 12's _tile_loadconfig: its asm names only the operand's first 8 bytes as read, so GCC
     * may drop or sink the stores to the rest (seen: a build whose colsb[0..1] stayed 0, and the
     * LDTILECFG faulted). This operand is the whole 64-byte struct. */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

#endif
