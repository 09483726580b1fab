// The stability check's kernels (docs/stability.md, "The kernels"). CUDA C without CUDA's
// headers: clang's NVPTX builtins and inline PTX only, so Debian's clang compiles it to PTX
// with nothing from the CUDA toolkit. tools/kernels/build-ptx.sh writes stability.ptx, which
// crates/core/src/stability/cuda.rs embeds; crates/core/tests/core/stability_kernels.rs checks that the two agree.
//
// Every kernel runs with blocks of THREADS threads (cuda.rs launches them so). Results that
// must match the CPU (crates/core/src/stability/reference.rs, VramPattern::word) use explicitly rounded
// PTX operations, so the compiler cannot contract or reorder them.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
typedef float f32x2 __attribute__((ext_vector_type(2)));

#define KERNEL extern "C" __attribute__((global)) __attribute__((launch_bounds(256)))
// The GEMM asks for two blocks on each multiprocessor (at most 128 registers a thread), so one
// block computes while the other waits at its barrier.
#define GEMM_KERNEL extern "C" __attribute__((global)) __attribute__((launch_bounds(256, 2)))
#define DEVICE static __attribute__((device)) __attribute__((always_inline)) inline
#define SHARED __attribute__((shared))

#define THREADS 256

DEVICE u32 thread_x() { return __nvvm_read_ptx_sreg_tid_x(); }
DEVICE u32 block_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEVICE u32 block_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
DEVICE u32 grid_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }

DEVICE u32 float_bits(float value) { return __builtin_bit_cast(u32, value); }

// A NaN is always a wrong result, even where the expected value is a NaN.
DEVICE bool is_nan_bits(u32 bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

// Adds every thread's count into *total: summed in the block first, then one atomic add.
SHARED static u64 block_counts[THREADS];
DEVICE void add_block_count(u64 mine, u64* total) {
  u32 t = thread_x();
  block_counts[t] = mine;
  __syncthreads();
  for (u32 half = THREADS / 2; half > 0; half >>= 1) {
    if (t < half) block_counts[t] += block_counts[t + half];
    __syncthreads();
  }
  if (t == 0 && block_counts[0] != 0) {
    asm volatile("red.add.u64 [%0], %1;" ::"l"(total), "l"(block_counts[0]) : "memory");
  }
}

// reference.rs hash32 ("lowbias32").
DEVICE u32 hash32(u32 x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// reference.rs gemm_input_bf16: a multiple of 1/128 in [-1, 1), exact in bf16.
DEVICE u16 gemm_input_bf16(u32 matrix, u32 index) {
  u32 hashed = hash32(index ^ (matrix * 0x9E3779B9u));
  float value = (float)((int)(hashed >> 24) - 128) * (1.0f / 128.0f);  // both steps exact
  return (u16)(float_bits(value) >> 16);
}

// Fills A and B (n×n bf16 each, `count` = n² elements). A is row-major; B is stored by
// column (element (k, j) at j·n + k), so both keep k contiguous for the tensor cores.
KERNEL void gemm_fill(u16* a, u16* b, u32 count) {
  for (u32 i = block_x() * THREADS + thread_x(); i < count; i += grid_x() * THREADS) {
    a[i] = gemm_input_bf16(0, i);
    b[i] = gemm_input_bf16(1, i);
  }
}

// The GEMM: C = A·B, bf16 in, fp32 accumulated with mma.sync m16n8k16. Each block computes a
// 128×128 tile of C; its 8 warps each 64×32 of it. k runs in steps of 32 through two shared
// buffers filled by cp.async; every element of C is summed in the same k order on every run,
// so the result is the same to the bit.
#define TILE 128
#define TILE_K 32
#define ROW_WORDS 20  // 16 words (32 bf16) of a tile row and 4 of padding against bank conflicts

DEVICE u32 shared_address(const void* pointer) {
  u32 address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

DEVICE void copy_async_16(u32* shared_destination, const u32x4* global_source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(shared_destination)),
               "l"(global_source)
               : "memory");
}

DEVICE void mma_bf16(float* acc, const u32* a, const u32* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

SHARED static u32 a_tiles[2][TILE * ROW_WORDS] __attribute__((aligned(16)));
SHARED static u32 b_tiles[2][TILE * ROW_WORDS] __attribute__((aligned(16)));

// Starts copying k tile `k_tile` of A's and B's block rows into buffer `buffer`: 128 rows of
// 32 bf16 each (4 vectors of 16 bytes), 2 vectors of each per thread.
DEVICE void load_k_tile(const u32x4* a, const u32x4* b, u64 n, u32 block_row, u32 block_col,
                        u32 k_tile, u32 buffer) {
  u64 row_vectors = n / 8;
  #pragma unroll
  for (u32 j = 0; j < 2; ++j) {
    u32 v = thread_x() + THREADS * j;
    u32 row = v / 4, column = v % 4;
    u64 k_vector = (u64)k_tile * (TILE_K / 8) + column;
    copy_async_16(&a_tiles[buffer][row * ROW_WORDS + column * 4],
                  a + (block_row + row) * row_vectors + k_vector);
    copy_async_16(&b_tiles[buffer][row * ROW_WORDS + column * 4],
                  b + (block_col + row) * row_vectors + k_vector);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Grid: (n/128, n/128) blocks of 256 threads; n a multiple of 128.
GEMM_KERNEL void gemm_bf16(const u32x4* a, const u32x4* b, float* c, u32 n) {
  u32 lane = thread_x() % 32, warp = thread_x() / 32;
  u32 group = lane / 4, in_group = lane % 4;  // the fragments' groupID and threadID_in_group
  u32 warp_row = (warp / 4) * 64, warp_col = (warp % 4) * 32;
  u32 block_row = block_y() * TILE, block_col = block_x() * TILE;
  u32 k_tiles = n / TILE_K;

  float acc[4][4][4];
  #pragma unroll
  for (u32 i = 0; i < 4; ++i)
    #pragma unroll
    for (u32 j = 0; j < 4; ++j)
      #pragma unroll
      for (u32 e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  load_k_tile(a, b, n, block_row, block_col, 0, 0);
  for (u32 k_tile = 0; k_tile < k_tiles; ++k_tile) {
    u32 buffer = k_tile & 1;
    if (k_tile + 1 < k_tiles) {
      load_k_tile(a, b, n, block_row, block_col, k_tile + 1, buffer ^ 1);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    __syncthreads();
    const u32* a_tile = a_tiles[buffer];
    const u32* b_tile = b_tiles[buffer];
    #pragma unroll
    for (u32 k_word = 0; k_word < TILE_K / 2; k_word += 8) {  // k steps of 16 (8 words)
      // B's fragments for the warp's 4 column groups, then A's row groups one at a time (fewer
      // live registers than holding all of A's).
      u32 b_fragments[4][2];
      #pragma unroll
      for (u32 j = 0; j < 4; ++j) {
        u32 column = warp_col + j * 8 + group;
        b_fragments[j][0] = b_tile[column * ROW_WORDS + k_word + in_group];
        b_fragments[j][1] = b_tile[column * ROW_WORDS + k_word + in_group + 4];
      }
      #pragma unroll
      for (u32 i = 0; i < 4; ++i) {
        u32 row = warp_row + i * 16 + group;
        u32 a_fragment[4] = {a_tile[row * ROW_WORDS + k_word + in_group],
                             a_tile[(row + 8) * ROW_WORDS + k_word + in_group],
                             a_tile[row * ROW_WORDS + k_word + in_group + 4],
                             a_tile[(row + 8) * ROW_WORDS + k_word + in_group + 4]};
        #pragma unroll
        for (u32 j = 0; j < 4; ++j) mma_bf16(acc[i][j], a_fragment, b_fragments[j]);
      }
    }
    __syncthreads();  // the buffer is refilled by the next step's copy
  }

  #pragma unroll
  for (u32 i = 0; i < 4; ++i) {
    u64 row = block_row + warp_row + i * 16 + group;
    #pragma unroll
    for (u32 j = 0; j < 4; ++j) {
      u64 column = block_col + warp_col + j * 8 + in_group * 2;
      f32x2 top = {acc[i][j][0], acc[i][j][1]};
      f32x2 bottom = {acc[i][j][2], acc[i][j][3]};
      *(f32x2*)&c[row * n + column] = top;
      *(f32x2*)&c[(row + 8) * n + column] = bottom;
    }
  }
}

// Counts the elements of C whose bits differ from C_ref's, or that are NaN; `vectors` = n²/4.
KERNEL void compare_f32(const u32x4* c, const u32x4* c_ref, u64 vectors, u64* wrong) {
  u64 mine = 0;
  for (u64 i = block_x() * THREADS + thread_x(); i < vectors; i += (u64)grid_x() * THREADS) {
    u32x4 got = c[i], want = c_ref[i];
    for (u32 e = 0; e < 4; ++e) mine += (got[e] != want[e] || is_nan_bits(got[e])) ? 1 : 0;
  }
  add_block_count(mine, wrong);
}

DEVICE float fma_rn(float a, float b, float c) {
  float d;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}
DEVICE float mul_rn(float a, float b) {
  float d;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
DEVICE float add_rn(float a, float b) {
  float d;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// reference.rs fma_chain_start: 0.1 + 0.8·v, a multiply then an add, each rounded.
DEVICE float chain_start(u32 seed) {
  float v;
  asm("cvt.rn.f32.u32 %0, %1;" : "=f"(v) : "r"(hash32(seed) >> 9));  // exact: 23 bits
  v = mul_rn(v, 1.0f / 8388608.0f);                                   // exact: 2^-23
  return add_rn(0.1f, mul_rn(0.8f, v));
}

// Thread t runs reference.rs fma_chain from seed t % seeds for `steps` steps, folding every
// step's result into an FNV-1a checksum, and counts a checksum that differs from
// reference[seed].
KERNEL void fma_chain(const u32* reference, u32 threads, u32 steps, u32 seeds, u64* wrong) {
  u32 t = block_x() * THREADS + thread_x();
  u64 mine = 0;
  if (t < threads) {
    u32 seed = t % seeds;
    float x = chain_start(seed);
    u32 checksum = 0x811C9DC5u;
    for (u32 step = 0; step < steps; ++step) {
      x = mul_rn(fma_rn(-x, x, x), 3.9f);
      checksum = (checksum ^ float_bits(x)) * 0x01000193u;
    }
    mine = checksum != reference[seed] ? 1 : 0;
  }
  add_block_count(mine, wrong);
}

// VramPattern::word for the code (kind, param) of VramPattern::code; `index` counts 32-bit
// words from the start of the tested region and is truncated to 32 bits as in Rust.
DEVICE u32 pattern_word(u32 kind, u32 param, u64 index) {
  u32 low = (u32)index;
  switch (kind) {
    case 0: return 0u;
    case 1: return 0xFFFFFFFFu;
    case 2: return 0xAAAAAAAAu;
    case 3: return 0x55555555u;
    case 4: return 1u << ((low + param) % 32);
    case 5: return ~(1u << ((low + param) % 32));
    case 6: return low ^ param;
    default: return 0u;
  }
}

// Writes the pattern over `vectors` 16-byte vectors whose first word is word `first_word` of
// the tested region.
KERNEL void vram_fill(u32x4* words, u64 vectors, u64 first_word, u32 kind, u32 param) {
  for (u64 i = block_x() * THREADS + thread_x(); i < vectors; i += (u64)grid_x() * THREADS) {
    u64 index = first_word + i * 4;
    u32x4 value = {pattern_word(kind, param, index), pattern_word(kind, param, index + 1),
                   pattern_word(kind, param, index + 2), pattern_word(kind, param, index + 3)};
    words[i] = value;
  }
}

// Reads them back and counts the words that differ.
KERNEL void vram_check(const u32x4* words, u64 vectors, u64 first_word, u32 kind, u32 param,
                       u64* wrong) {
  u64 mine = 0;
  for (u64 i = block_x() * THREADS + thread_x(); i < vectors; i += (u64)grid_x() * THREADS) {
    u64 index = first_word + i * 4;
    u32x4 got = words[i];
    for (u32 e = 0; e < 4; ++e) mine += got[e] != pattern_word(kind, param, index + e) ? 1 : 0;
  }
  add_block_count(mine, wrong);
}
