"""What the narrow dtypes' native tests share (tests/eager/native/test_narrow_dtypes_native.py,
tests/compiler/test_native_narrow.py): special values of each dtype, eager's numpy
kernels as the reference (the generated ones switched off), and a bit-for-bit check."""
import contextlib

import ml_dtypes
import numpy as np

import eager
from eager.kernels import elementwise, reduction

HALVES = ("bfloat16", "float16")
INTEGERS = ("uint8", "int8", "int16")
NARROW = HALVES + INTEGERS

_HALF_SPECIAL = [0.0, -0.0, 1.0, -1.0, np.nan, -np.nan, np.inf, -np.inf, 0.5, 2.0, 3.0,
                 2.0 ** -8, 3 * 2.0 ** -8, 2.0 ** -11, 3 * 2.0 ** -11, 1 + 2.0 ** -7,
                 1 + 2.0 ** -10, -2.5, 100.7, 255.0, 2049.0, 65504.0, -60000.0, 1e-6,
                 3.3e38, -3.3e38, 1e-40]
_INT_SPECIAL = [0, 1, -1, 2, 3, 7, 127, -128, 100, -100, 200, 255, 128, -129, 300, 32767,
                -32768, 1000]


def special(dtype: str, extra: int = 0, seed: int = 0) -> np.ndarray:
    """The dtype's awkward values (NaN of both signs, infinities, signed zeros, ties of
    its rounding, numbers at and past its range, which wrap for integers), then `extra`
    random ones, as a numpy array of the dtype."""
    rng = np.random.default_rng(seed)
    if dtype in HALVES:
        values = np.array(_HALF_SPECIAL + list(rng.standard_normal(extra) * 4), np.float32)
        with np.errstate(over="ignore"):
            return values.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)
    values = np.array(_INT_SPECIAL + list(rng.integers(-40000, 40000, extra)), np.int64)
    return values.astype(np.dtype(dtype))  # wraps, as PyTorch's casts do


@contextlib.contextmanager
def numpy_kernels():
    """Eager's pointwise ops, reductions and row ops through their numpy kernels only (the
    generated ones off, as KILN_EAGER_NATIVE=0 sets)."""
    saved = elementwise._native_pointwise, reduction._native_rows
    elementwise._native_pointwise = reduction._native_rows = False
    try:
        yield
    finally:
        elementwise._native_pointwise, reduction._native_rows = saved


def bits(a: np.ndarray) -> np.ndarray:
    """a's elements as unsigned words, so equal means bit for bit (NaN payloads and the
    sign of zero included)."""
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


_QUIET = {"bfloat16": 0x7FC0, "float16": 0x7E00, "float32": 0x7FC00000,
          "float64": 0x7FF8000000000000}


def assert_same(got: eager.Tensor, want: eager.Tensor, ulps: int = 0) -> None:
    """Bit for bit, -0.0 included; a NaN where numpy's is, quiet, of any sign and payload
    (an op over two NaNs gives either: x86 keeps its first operand's, and LLVM and numpy
    may swap a commutative op's). For float math (vmath against numpy's libm: a float32
    ulp or two apart before rounding), within `ulps` units of the result type."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = np.atleast_1d(got.numpy()), np.atleast_1d(want.numpy())
    nan = np.zeros(w.shape, bool)
    if want.dtype.is_floating_point:
        nan = np.isnan(w.astype(np.float64))
        assert (np.isnan(g.astype(np.float64)) == nan).all(), "NaN in other places"
        quiet = bits(g).dtype.type(_QUIET[want.dtype.name])
        assert (bits(g)[nan] & quiet == quiet).all(), "a signalling NaN"
    if ulps == 0:
        bad = (bits(g) != bits(w)) & ~nan
        assert not bad.any(), f"{bad.sum()} differ: got {g[bad][:8]}, want {w[bad][:8]}"
        return
    ordered = [np.where(b.astype(np.int64) >= 1 << (8 * b.itemsize - 1),
                        (1 << (8 * b.itemsize - 1)) - b.astype(np.int64), b.astype(np.int64))
               for b in (bits(g), bits(w))]
    apart = np.abs(ordered[0] - ordered[1])[~nan]
    assert apart.max(initial=0) <= ulps, f"{apart.max()} units apart"
