"""Compiled GEMM kernels and what a call of them is made of.

`kernel(dtype, spec)` returns the `CompiledGemm` of ir/kernel.py for this CPU's tile: the
addresses of its entry points, each compiled (once per process, through runtime's disk
cache across processes) when first used. A `Call` is one product for them (sizes, pointers,
element strides, scalars); a `Batch` is products that differ only in where their
operands are. gemm_jobs.py cuts a batch into pieces and runs them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from runtime import debugging
from runtime.cpu.values import emit_activation
from runtime.cpu.gemm import config
from runtime.cpu.gemm.emit.kernel import ENTRIES, EpilogueSpec, Tile, build_module


class SecondSight:
    """Keys seen once, so that costly preparation (a compiled kernel, a plan) is made
    for what is seen twice, not for every one-off; past `limit` keys (default
    config.SIGHTINGS_LIMIT) it forgets them all."""

    def __init__(self, limit: int | None = None):
        self.limit, self._seen = limit or config.SIGHTINGS_LIMIT, set()

    def again(self, key) -> bool:
        """Whether `key` was seen before; remembers it."""
        if key in self._seen:
            return True
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add(key)
        return False


@dataclass(frozen=True)
class Blocking:
    """Cache blocking: MC rows of A and KC of K per packed A block (L2), NC columns per
    packed B block."""
    mc: int
    kc: int
    nc: int


class Call(NamedTuple):
    """One product for the kernel, in KERNEL_ARGS order up to the packing arguments:
    sizes, then pointers (ints, bytes) and element strides of op(A), op(B), C, out, bias
    and residual, and the scalars; `rounded`, for 16-bit operands, where the result goes
    rounded to their type (laid out as out, in 2-byte elements: its offsets are half
    of out's float32 ones), or 0."""
    m: int
    n: int
    k: int
    a: int
    a_rs: int
    a_cs: int
    b: int
    b_rs: int
    b_cs: int
    c: int
    c_rs: int
    c_cs: int
    out: int
    o_rs: int
    alpha: float
    beta: float
    scale: float
    bias: int
    bias_stride: int
    res: int
    r_rs: int
    r_cs: int
    a_in_place: int
    rounded: int = 0

    def rows(self, start: int, stop: int, itemsize: int, bias_per_row: bool,
             operand_itemsize: int | None = None) -> "Call":
        """The sub-problem of rows start:stop of C (`operand_itemsize`: of A's elements,
        when not `itemsize`)."""
        return self._replace(
            m=stop - start, a=self.a + start * self.a_rs * (operand_itemsize or itemsize),
            c=self.c + start * self.c_rs * itemsize, out=self.out + start * self.o_rs * itemsize,
            rounded=self.rounded and self.rounded + start * self.o_rs * 2,
            res=self.res + start * self.r_rs * itemsize,
            bias=self.bias + (start * self.bias_stride * itemsize if bias_per_row else 0))

    def cols(self, start: int, stop: int, itemsize: int, bias_per_col: bool,
             operand_itemsize: int | None = None) -> "Call":
        """The sub-problem of columns start:stop of C (`operand_itemsize`: of B's
        elements, when not `itemsize`)."""
        return self._replace(
            n=stop - start, b=self.b + start * self.b_cs * (operand_itemsize or itemsize),
            c=self.c + start * self.c_cs * itemsize, out=self.out + start * itemsize,
            rounded=self.rounded and self.rounded + start * 2,
            res=self.res + start * self.r_cs * itemsize,
            bias=self.bias + (start * self.bias_stride * itemsize if bias_per_col else 0))


class Batch(NamedTuple):
    """Products that differ only in where their operands are: `call`, the first, and
    `offsets` (count x 6, bytes) of each product's a, b, c, out, bias and res from it;
    None for the one product."""
    call: Call
    offsets: np.ndarray | None = None

    @property
    def count(self) -> int:
        return 1 if self.offsets is None else len(self.offsets)

    def calls(self) -> list[Call]:
        if self.offsets is None:
            return [self.call]
        c = self.call
        return [c._replace(a=c.a + a, b=c.b + b, c=c.c + cc, out=c.out + o, bias=c.bias + bias,
                           res=c.res + r, rounded=c.rounded and c.rounded + o // 2)
                for a, b, cc, o, bias, r in self.offsets.tolist()]


class CompiledGemm:
    """One (dtype, tile, epilogue): the addresses of its entry points as runtime.pool
    items (record, worker): packed, direct, and the packing of B that threads share.
    `items[entry]` compiles an entry the first time it is asked for (through the kernel
    cache), so a process that only multiplies small matrices never builds the packed
    kernel; `compiled` lists the entries built so far."""

    def __init__(self, tile: Tile, spec: EpilogueSpec, jit):
        self.tile, self.spec = tile, spec
        self.dtype = np.dtype(tile.dtype)
        self.operand_itemsize = operand_dtype(tile.operands).itemsize
        self.packs_a = tile.operands != tile.dtype  # always: A is widened while packed
        operands = "" if tile.operands == tile.dtype else f"{tile.operands}_"
        operands += "dot_" if tile.dot else ""
        self.name = (f"kiln_gemm_{operands}{tile.dtype}_{tile.mr}x{tile.nr}u{tile.unroll}_"
                     f"{spec.tag}")
        self.items = _Entries(self, jit)

    @property
    def compiled(self) -> tuple[str, ...]:
        return tuple(self.items)

    def pack_b_record(self, call: Call, start: int, stop: int, packed_b: int) -> tuple:
        """The PACK_B_ARGS that put columns start:stop (start a multiple of NR) of the
        call's B into `packed_b`, which holds all of B as NR-column panels of all K
        rows (pairs of rows in a dot-product tile: Tile.step)."""
        steps = -(-call.k // self.tile.step)
        return (call.b + start * call.b_cs * self.operand_itemsize, call.b_rs, call.b_cs,
                call.k, stop - start, packed_b + start * steps * self.dtype.itemsize)


def default_tile(dtype: str, lanes_f32: int) -> Tile:
    """The register tile for `dtype` on a CPU with `lanes_f32` float32 lanes per vector:
    about 24 accumulators out of 32 registers with AVX-512, 12 of 16 with AVX2."""
    lanes = lanes_f32 if dtype == "float32" else lanes_f32 // 2
    if lanes_f32 >= 16:
        return Tile(dtype, mr=12, nr=2 * lanes, lanes=lanes)
    return Tile(dtype, mr=6, nr=2 * lanes, lanes=lanes)


_kernels: dict = {}
_kernels_lock = threading.Lock()


def dot_products() -> bool:
    """Whether bfloat16 products take the dot-product tile (Tile.dot): where
    config.BF16_DOT allows it and the target CPU (runtime/llvm/target.py) has
    AVX512-BF16."""
    from runtime.llvm.target import selected
    return config.BF16_DOT and "avx512bf16" in selected().enabled


def kernel(dtype: np.dtype, spec: EpilogueSpec, tile: Tile | None = None,
           operands: str | None = None) -> CompiledGemm:
    """The compiled kernel for (dtype, tile, epilogue), built on first use; `operands`
    (bfloat16 or float16 for float32) sets the tile's operand type (Tile.operands), and
    bfloat16 ones the dot-product tile where `dot_products()`.
    Transposes need no kernel of their own: packing reads any strides, with a vector
    path for the unit-stride side."""
    key = (np.dtype(dtype), spec, tile, operands, operands == "bfloat16" and dot_products())
    found = _kernels.get(key)
    if found is not None:
        return found
    from runtime.llvm.jit import host_jit, vector_width
    with _kernels_lock:
        if key not in _kernels:
            chosen = tile or default_tile(key[0].name, vector_width())
            if operands is not None:
                chosen = replace(chosen, operands=operands, dot=key[-1])
            same = (key[0], spec, chosen, None, False)
            made = _kernels.get(same) or CompiledGemm(chosen, spec, host_jit())
            _kernels[key] = _kernels[same] = made
        return _kernels[key]


class _Entries(dict):
    """A CompiledGemm's entry addresses by name, each compiled on first lookup. Threads
    asking for one entry at once compile it once (the kernel cache locks each key);
    different entries compile at once."""

    def __init__(self, kernel: CompiledGemm, jit):
        super().__init__()
        self.kernel, self.jit = kernel, jit

    def __missing__(self, entry: str) -> int:
        if entry not in ENTRIES:
            raise KeyError(f"a GEMM kernel has no entry {entry!r}; it has {ENTRIES}")
        return self.setdefault(entry, _compile(self.jit, self.kernel, entry))

    def compile(self, entries: list[str]) -> None:
        """Compile those of `entries` not compiled yet, in parallel threads (a packed
        variant with pack_b: ~0.8 s and ~0.3 s of LLVM, overlapped)."""
        from runtime.llvm.jit import in_parallel
        missing = [entry for entry in dict.fromkeys(entries) if entry not in self]
        in_parallel([lambda entry=entry: self[entry] for entry in missing])


@dataclass(frozen=True)
class BuildEntry:
    """Builds one entry of a GEMM kernel into a module (it pickles: a background compile
    worker can build it)."""
    name: str
    tile: Tile
    spec: EpilogueSpec
    entry: str

    def __call__(self, module) -> None:
        build_module(module, self.name, self.tile, self.spec, emit_activation, (self.entry,))


def _compile(jit, kernel: CompiledGemm, entry: str) -> int:
    name = kernel.name
    spec = repr((name, kernel.tile, kernel.spec, entry))  # what build_module reads
    build = BuildEntry(name, kernel.tile, kernel.spec, entry)
    address = jit.load_spec(f"{name}_{entry}", spec, build, [f"{name}_{entry}"],
                            config.SPEED_LEVEL)[f"{name}_{entry}"]
    debugging.show_kernel(jit, f"{name}_{entry}", build, config.SPEED_LEVEL)
    return address


def operand_dtype(name: str) -> np.dtype:
    """The numpy dtype of operand type `name` (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def reads_a_in_place(a_rs: int, a_cs: int, itemsize: int) -> bool:
    """Whether the packed path should broadcast from A in place rather than pack it:
    its rows must be contiguous, and not a multiple of 2 KiB apart (then MR rows would
    crowd one or two L1 sets and evict each other)."""
    return a_cs == 1 and not crowds_l1(a_rs, itemsize)


def crowds_l1(row_stride: int, itemsize: int) -> bool:
    """Whether rows `row_stride` elements apart are a multiple of 2 KiB apart, so that
    a tile's rows fall in one or two L1 sets and evict each other."""
    return (row_stride * itemsize) % config.CONFLICT_STRIDE == 0
