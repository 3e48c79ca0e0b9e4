"""Every tuning threshold of kiln's GEMM, in one place, with what it decides and, where
it was measured, on what. The modules read them as `config.NAME` when they run, so a
test can change one with monkeypatch.

The LLVM IR emitters keep their own code-shape constants (gemm/emit/: kernel.py's
ROWS_FIRST_DEPTH, small.py's FULL_UNROLL_K and K_UNROLL, tools.py's PACK_ALIGN), and
tune.py's default_blocking its cache-size model.
"""
from __future__ import annotations

# Which kernel (api.py, small.py) ------------------------------------------------------
DIRECT_MAX_MACS = 144 ** 3  # multiply-adds up to which packing costs more than it saves
# ... and up to this many where A's rows do not crowd L1 sets (kernels.crowds_l1): the
# direct and specialised kernels beat the packed one up to here (float32, one thread,
# znver5, us: 512x192x64 B^T 57 -> 46, 256x64x512 A^T 84 -> 60, 203^3 80 -> 66,
# 1024x8x1000 281 -> 137), except where A's rows are 4 KiB apart (1024x8x1024 413 -> 575,
# which stays packed); and a model of this size compiles no packed kernel at all.
DIRECT_SPREAD_MAX_MACS = 1 << 23  # 512 x 256 x 64
SMALL_MAX_MACS = 1 << 23  # above this the packed kernel's cache blocking wins
SMALL_B_BUFFER_ELEMENTS = 48 * 1024  # K x N of a B copied to the stack (384 KiB in float64)
SMALL_MAX_KERNELS = 512  # specialised variants compiled per process; MCJIT never frees code
L1_PANEL_BYTES = 32 * 1024  # a B panel up to this stays in L1 (48 KiB) next to A's rows

# A packed product whose out^T the register tiles cover with this many times the
# useful multiply-adds of out runs as out^T = B^T A^T (api._fits_better_transposed),
# written to a buffer and copied back (float32, one thread, rocketlake, an AVX-512
# Xeon): 512x4608 @ 4608x8 1.74 -> 1.10 ms, tiles 25% -> 67% used.
TRANSPOSE_GAIN = 1.2

# Threads (jobs.py, small.py) ----------------------------------------------------------
# Each thread gets at least this many multiply-adds (about 4 us of work on one core: a
# job costs the pool ~1-3 us when its workers are awake); pieces are no smaller.
PARALLEL_MIN_MACS = 1 << 19
PIECE_MIN_MACS = 1 << 18
SPLIT_MIN_MACS = 1 << 18  # from this size on, small products are cut over the threads
COLUMNS_MIN_WIDTH = 256  # columns per thread from which threads split N (jobs._by_columns)
# Column pieces up to this wide read A in place (rows contiguous) even where its row
# stride crowds L1 sets (kernels.reads_a_in_place): each piece would pack all of A
# again, which costs them more (512^2 float32 on 2 threads, 4 pieces of 128 columns:
# 261 GFLOP/s in place, 235 packed; 1024^2, 256 columns: 306 and 303; 1536^2, 384
# columns: 299 and 308).
NARROW_PIECE_COLUMNS = 256

# Memory (jobs.py, kernels.py) ---------------------------------------------------------
SHARED_B_ELEMENTS = 1 << 22  # the shared packing of B goes column chunk by chunk
CONFLICT_STRIDE = 2048  # bytes: A rows this far apart crowd one or two L1 sets

# Repeated calls (plans.py, kernels.SecondSight) ----------------------------------------
PLAN_MAX_MACS = 1 << 28  # about 645^3: above it the Python a plan saves is a small part
PLAN_LIMIT = 256  # plans kept; then they start over
SIGHTINGS_LIMIT = 4096  # keys a SecondSight remembers; then it forgets them all

# Compiling (kernels.py, small.py) -----------------------------------------------------
# LLVM's O1 pipeline for every GEMM kernel: the micro-kernels are explicit vector IR,
# so O3's extra passes bought nothing here. Measured against O3 (znver4, one thread,
# alternating processes, best of runs): packed float32 256-1024 and float64 384 in
# noise (e.g. 1024^2 130 vs 123 GFLOP/s), specialised small products 16x64x64-512x65x64
# in noise (2.5-60 us); 1732 products (f32/f64, transposes, every activation with bias,
# residual and scale, 1 and 2 threads, generic and specialised, bmm) bitwise equal.
# Optimising takes 436 instead of 688 ms for packed_a_in_place_shallow, 115 instead of
# 165 for pack_b, 89 instead of 132 for direct.
SPEED_LEVEL = 1

# bfloat16 products (kernels.dot_products) ----------------------------------------------
# On CPUs with AVX512-BF16, bfloat16 operands stay 16-bit in the packed panels and are
# multiplied by vdpbf16ps (two products per float32 lane per instruction); False widens
# them to float32 while packing, as on other CPUs (bitwise the float32 product).
BF16_DOT = True

# Autotuning (tune.py) -----------------------------------------------------------------
TUNE_SIZE = 768  # the square problem the candidate blockings are timed on
