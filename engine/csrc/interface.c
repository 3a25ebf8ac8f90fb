/* What cpu_kernels.py checks at load against its ctypes mirrors (batchscope.h says why): the ABI
 * version, and each mirrored struct's size with every field's offset and size, and the constants
 * Python relies on, as a table of named numbers. */
#include <stddef.h>

#include "batchscope.h"
#include "vec.h"

#define STRUCT(T) {"sizeof(" #T ")", sizeof(T)}
#define FIELD(T, f) {"offsetof(" #T ", " #f ")", offsetof(T, f)}, {"sizeof(" #T "." #f ")", sizeof(((T *)0)->f)}
#define CONSTANT(c) {#c, c}

static const InterfaceFact FACTS[] = {
    STRUCT(LinearDesc), FIELD(LinearDesc, weight), FIELD(LinearDesc, bias), FIELD(LinearDesc, out),
    FIELD(LinearDesc, in),
    STRUCT(LayerDesc), FIELD(LayerDesc, qkv), FIELD(LayerDesc, o), FIELD(LayerDesc, gate_up), FIELD(LayerDesc, down),
    FIELD(LayerDesc, norm1), FIELD(LayerDesc, norm2), FIELD(LayerDesc, eps), FIELD(LayerDesc, kernel),
    FIELD(LayerDesc, heads), FIELD(LayerDesc, kv_heads), FIELD(LayerDesc, dim),
    STRUCT(StepDesc), FIELD(StepDesc, rows), FIELD(StepDesc, cos), FIELD(StepDesc, sin), FIELD(StepDesc, slots),
    FIELD(StepDesc, row_start), FIELD(StepDesc, row_count), FIELD(StepDesc, num_cached), FIELD(StepDesc, tables),
    FIELD(StepDesc, table_stride), FIELD(StepDesc, segments), FIELD(StepDesc, block_size), FIELD(StepDesc, max_keys),
    FIELD(StepDesc, invariant), FIELD(StepDesc, bf16_cache), FIELD(StepDesc, threads), FIELD(StepDesc, scale),
    FIELD(StepDesc, h), FIELD(StepDesc, qkv), FIELD(StepDesc, attn), FIELD(StepDesc, gate_up), FIELD(StepDesc, act),
    FIELD(StepDesc, delta),
    CONSTANT(BS_MAX_HEADS), CONSTANT(BS_MAX_DIM), CONSTANT(LINEAR_FP32), CONSTANT(LINEAR_WIDEN),
    CONSTANT(LINEAR_PAIRS), CONSTANT(LINEAR_AMX),
};

int bs_abi_version(void) { return BS_ABI_VERSION; }

int bs_kernel_vector_bits(void) { return (int)sizeof(vf) * 8; }

int bs_vector_bits(void) {
#if defined(__AVX512F__)
    return 512;
#elif defined(__AVX__)
    return 256;
#elif defined(__SSE2__) || defined(__ARM_NEON)
    return 128;
#else
    return 0;
#endif
}

const InterfaceFact *bs_interface(int *count) {
    *count = (int)(sizeof FACTS / sizeof FACTS[0]);
    return FACTS;
}
