"""isin's scan as one generated kernel per element type, under eager's CPU kernel
(eager/kernels/membership.py chooses it for a small enough test set; a table or a sorted
search serves larger ones, and every call while the kernel compiles in the background).

    void k(T* elements, T* tests, i8* out, i64 n, i64 m, i8 flip)

`elements` (n) and `tests` (m) are contiguous; out[i] = (elements[i] equals some
tests[j]) xor flip, for i < n. The elements go a vector at a time (the ISA's width: 16
lanes of 32 bits on AVX-512, 8 of 64), UNROLL vectors a trip while they fit, so that each
test value, broadcast once, is compared with all of them; the comparisons are ORed into
one mask per vector. Floats compare ordered (NaN equals nothing, -0.0 equals 0.0). The
last vector's loads and stores are masked: no lane reads or writes past n.
"""
from __future__ import annotations

import ctypes

import numpy as np

from runtime.llvm.jit import KernelPending, deferring_call, host_jit

TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
         np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
"""The element types a kernel is made for (eager's kernel casts the others to one)."""
_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_int8)
_kernels: dict = {}  # type name -> the ctypes function
calls = 0  # kernels run (tests check that the native path ran)
UNROLL = 4  # vectors of elements a trip, each compared with one broadcast test value


def isin(elements: np.ndarray, tests: np.ndarray, invert: bool) -> np.ndarray | None:
    """(elements equal to some value of `tests`) xor invert, a bool array of the elements'
    shape; both of one type of TYPES. None while the kernel compiles in the background."""
    global calls
    try:
        fn = deferring_call(_kernel, TYPES[elements.dtype])
    except KernelPending:
        return None
    out = np.empty(elements.shape, np.bool_)
    if out.size == 0:
        return out
    src = np.ascontiguousarray(elements)
    values = np.ascontiguousarray(tests.reshape(-1))
    fn(src.ctypes.data, values.ctypes.data, out.ctypes.data, src.size, values.size,
       int(invert))
    calls += 1
    return out


def lanes(dtype: np.dtype) -> int:
    """The elements of `dtype` (one of TYPES) the kernel compares at once."""
    return _lanes(TYPES[dtype])


def _lanes(type_name: str) -> int:
    from runtime.llvm.target import selected
    return selected().vector_width // (1 if type_name[1:] == "32" else 2)


def _kernel(type_name: str):
    fn = _kernels.get(type_name)
    if fn is None:
        lanes = _lanes(type_name)
        name = f"kiln_isin_{type_name}"
        address = host_jit().load_spec(name, f"{name} w{lanes} u{UNROLL}",
                                       _Build(type_name, lanes), [name])[name]
        fn = _kernels[type_name] = _SIGNATURE(address)
    return fn


class _Build:
    """The kernel's IR for one element type and vector width (a module-level class: it
    pickles, so the background worker can build it)."""

    def __init__(self, type_name: str, lanes: int):
        self.type_name, self.lanes = type_name, lanes

    def __call__(self, module) -> None:
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import (I8, I64, VOID, at, constant, define, fold_range,
                                          for_range, lane_mask, load_vector, masked_load,
                                          i64, masked_store, splat, store_vector)
        kind, bits = self.type_name[0], int(self.type_name[1:])
        t = {"f32": ir.FloatType(), "f64": ir.DoubleType()}.get(self.type_name,
                                                                 ir.IntType(bits))
        width, align = self.lanes, bits // 8
        fn, b = define(module, f"kiln_isin_{self.type_name}",
                       ir.FunctionType(VOID, [t.as_pointer(), t.as_pointer(),
                                              I8.as_pointer(), I64, I64, I8]))
        elements, tests, out, n, m, flip = fn.args
        for pointer in (elements, tests, out):
            pointer.add_attribute("noalias")
        none = constant(ir.VectorType(ir.IntType(1), width), 0)
        flips = splat(b, flip, width)

        def equal(x, y):
            return b.fcmp_ordered("==", x, y) if kind == "f" else b.icmp_signed("==", x, y)

        def block(i, count: int, mask=None):
            """`count` vectors from element i (the one vector under `mask` if given)."""
            starts = [i if k == 0 else b.add(i, i64(k * width)) for k in range(count)]
            values = [masked_load(b, at(b, elements, s), mask, align) if mask is not None
                      else load_vector(b, at(b, elements, s), width, align) for s in starts]

            def compare(j, found):
                test = splat(b, b.load(at(b, tests, j)), width)
                return [b.or_(f, equal(v, test)) for f, v in zip(found, values)]
            found = fold_range(b, 0, m, 1, [none] * count, compare, "test")
            for s, f in zip(starts, found):
                result = b.xor(b.zext(f, ir.VectorType(I8, width)), flips)
                if mask is not None:
                    masked_store(b, result, at(b, out, s), mask, 1)
                else:
                    store_vector(b, result, at(b, out, s), 1)

        with for_range(b, i64(0), n, UNROLL * width, "unrolled", whole=True) as i:
            block(i, UNROLL)
        with for_range(b, i, n, width, "vectors", whole=True) as i:
            block(i, 1)
        with b.if_then(b.icmp_signed("<", i, n)):
            block(i, 1, lane_mask(b, b.sub(n, i), width))
        b.ret_void()
