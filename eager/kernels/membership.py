"""isin: where each element of `elements` equals some element of `test_elements` (either
may be a Python number, wrapped as for a binary op; not both: the dispatcher's TypeError).

Both are cast to their result type first (PyTorch's promotion: int32 elements and a
float32 test set compare in float32, an int32 tensor and the number 2**32 + 2 in int32),
then compared; the result is bool, of the elements' shape. NaN is in nothing (NaN !=
NaN), -0.0 is in a set holding 0.0. Bool inputs raise PyTorch's "Unsupported input type";
`assume_unique` changes no value. test_elements of any shape count as their flat values
(PyTorch's small-set path raises for a non-contiguous test set there: kiln flattens it).

The CPU kernel compares each element with every test value in generated code
(eager/backends/native/membership.py) while the test set holds at most SCAN_VECTORS
vectors' lanes of distinct values (768 int64 with AVX-512). A larger set of integers
within a narrow range (and any past TABLE_VECTORS vectors' lanes) is looked up in a table
of that range; any other is sorted and searched (numpy's sort and searchsorted, O((n + m) log m)); so is every set while the
kernel compiles in the background. The CUDA kernel composes CUDA ops: eq against a chunk
of test values at a time.
"""
from __future__ import annotations

import numpy as np

from eager.factories import zeros
from eager.kernels._common import load_native, meta_from_rule, promote, register, result, \
    type_word
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op
from ir.records import declare

_WIDENED = {np.dtype(np.float16): np.dtype(np.float32), dtypes.bfloat16.np: np.dtype(np.float32),
            np.dtype(np.uint8): np.dtype(np.int32), np.dtype(np.int8): np.dtype(np.int32),
            np.dtype(np.int16): np.dtype(np.int32)}
"""Types the generated scan has no kernel for, and the type each compares in exactly."""


def isin_rule(elements, test_elements, *, assume_unique=False, invert=False):
    for t in (elements, test_elements):
        if t.dtype is dtypes.bool_:
            raise RuntimeError(f"Unsupported input type encountered for isin(): "
                               f"{type_word(t.dtype)}")
    return tuple(elements._shape), dtypes.bool_


def isin_cpu(elements, test_elements, *, assume_unique=False, invert=False):
    shape, dt = isin_rule(elements, test_elements)
    common = promote(elements, test_elements).np
    compute = _WIDENED.get(common, common)
    x = elements._np().astype(common, copy=False).astype(compute, copy=False)
    tests = test_elements._np().astype(common, copy=False).astype(compute, copy=False)
    tests = tests.reshape(-1)
    if compute.kind == "f":
        tests = tests[tests == tests]  # NaN is in nothing
    native = (_membership or native_membership()) if x.size and tests.size else None
    lanes = native.lanes(compute) if native else 0
    if tests.size > SCAN_VECTORS * lanes and not assume_unique:
        tests = np.unique(tests)  # sorted, duplicates gone (-0.0 and 0.0 are one value)
    found = None
    if native and tests.size <= SCAN_VECTORS * lanes and not (
            tests.size > TABLE_VECTORS * lanes and _narrow(x, tests)):
        found = native.isin(x, tests, invert)
    if found is None:
        found = _looked_up(x, tests)
        if invert:
            np.logical_not(found, out=found)
    return result(found.reshape(shape), dt)


def _narrow(x: np.ndarray, tests: np.ndarray) -> bool:
    """Whether x and `tests` are integers, tests spanning a range of at most TABLE_SPAN
    values per input element (a table of it takes a few times the inputs' bytes)."""
    return x.dtype.kind == "i" and \
        int(tests.max()) - int(tests.min()) < TABLE_SPAN * (x.size + tests.size)


def _looked_up(x: np.ndarray, tests: np.ndarray) -> np.ndarray:
    """Whether each element of x is among `tests` (no NaN): a new bool array of x's shape.
    Integers in a narrow range are looked up in a table of that range, other values found
    by binary search of the sorted tests, O((n + m) log m)."""
    if tests.size == 0:
        return np.zeros(x.shape, np.bool_)
    if _narrow(x, tests):
        low, high = tests.min(), tests.max()
        table = np.zeros(int(high) - int(low) + 1, np.bool_)
        table[tests - low] = True
        clipped = np.clip(x, low, high)  # (x - low alone could overflow)
        clipped -= low
        found = table[clipped]
        found &= (x >= low) & (x <= high)
        return found
    ordered = np.sort(tests)
    at = np.searchsorted(ordered, x)
    np.minimum(at, ordered.size - 1, out=at)
    return ordered[at] == x


SCAN_VECTORS = 96
"""The generated scan takes a test set of up to this many vectors' lanes of values (768
int64 or 1536 float32 with AVX-512): its cost grows with m / lanes, a binary search's
with log2 m. 1e6 elements, one thread (AMD EPYC, AVX-512; runs vary by a fifth): int64
over a wide range, 512 values scanned in 22 ms, searched in 48; 1000 values 45-61 and
51-53 ms; 2048 values 98 and 57. float32: 1000 values 29 and 64 ms, 2048 values 54-68
and 66."""
TABLE_VECTORS = 4
"""Integers in a narrow range (_narrow) are looked up in a table rather than scanned from
this many vectors' lanes of test values on: the table costs ~1.5 ms for 1e6 elements
whatever the set, the scan ~0.35 ms per vector of values (int64: 64 values scanned in
2.8 ms, looked up in 1.5)."""
TABLE_SPAN = 4
"""The widest integer range looked up in a table, per input element. 1e6 int64 elements
and 1000 values in [0, 2000): the table takes 2 ms where the binary search takes 51 ms
(np.isin's table 5 ms; its sort, which it takes for a wide range, 122 ms)."""


_membership = None  # eager/backends/native/membership.py once loaded; False: it cannot be


def native_membership():
    """The generated scan's module, loaded at its first use; None where numpy must serve
    (KILN_EAGER_NATIVE=0, no llvmlite)."""
    global _membership
    if _membership is None:
        _membership = load_native(_import_membership)
    return _membership or None


def _import_membership():
    from eager.backends.native import membership as eager_membership
    return eager_membership


ISIN_CHUNK = 1 << 22
"""isin_ops compares at most this many (element, test element) pairs at once."""


def isin_ops(elements, test_elements, *, assume_unique=False, invert=False):
    """isin in other ops (the CUDA kernel): both cast to the result type on the elements'
    device, then eq of every element with a chunk of test values at a time, ORed."""
    device = (test_elements if elements._wrapped else elements).device
    common = promote(elements, test_elements)
    x = ops._to_copy(elements, dtype=common, device=device)
    tests = ops.reshape(ops._to_copy(test_elements, dtype=common, device=device), [-1])
    found = zeros(x.shape, dtype=dtypes.bool_, device=device)
    step = max(ISIN_CHUNK // max(x.numel(), 1), 1)
    column = ops.unsqueeze(x, -1)
    for start in range(0, tests.shape[0], step):
        chunk = ops.slice(tests, 0, start, start + step)
        hits = ops.sum(ops.eq(column, chunk), [-1])
        found = ops.bitwise_or(found, ops.gt(hits, 0))
    return ops.eq(found, False) if invert else found


register(Op.ISIN, isin_cpu, meta_from_rule(isin_rule))
ISIN = declare(Op.ISIN, function=True, differentiable=False)
