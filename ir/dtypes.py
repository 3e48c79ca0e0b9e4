"""Element types and PyTorch's type-promotion rules.

A DType is a small immutable record. Ten have kernels (ALL: bool, the integers uint8,
int8, int16, int32, int64, the floats float16, bfloat16, float32, float64); the rest of
PyTorch's are names only (NAMED_ONLY: the wider unsigned ints, complex, float8), so that
code naming them (a default argument, a table of types such as safetensors') loads, while
making a tensor of one is refused in eager, naming the dtype and the op.

numpy has no bfloat16: ml_dtypes (the JAX project's numpy element types) gives it one,
stored as 16-bit words, converting with round-to-nearest-even. The 16-bit floats compute
in float32 and round once (compute_np), as PyTorch's CPU kernels do, and every conversion
goes through `cast`, which rounds where PyTorch rounds.

Promotion follows PyTorch: operands fall into three tiers (tensors with dims, zero-dim
tensors, wrapped Python numbers); a lower tier changes the result only when it brings a
higher category (bool < integer < floating). Within a category the lattice is not a
chain: uint8 with int8 is int16, float16 with bfloat16 is float32.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np


class DType:
    __slots__ = ("name", "np", "itemsize", "is_floating_point", "is_complex", "is_signed",
                 "rank", "short", "has_kernels")

    def __init__(self, name: str, np_dtype, rank: int | None, short: str,
                 kind: str | None = None, itemsize: int | None = None, signed: bool | None = None):
        """`kind` and `itemsize` (numpy's letters: f, c, i, u, b) for a dtype numpy lacks;
        `signed` where it is not the kind's (float8_e8m0fnu, an exponent only, is not)."""
        self.name = name
        self.np = None if np_dtype is None else np.dtype(np_dtype)
        self.itemsize = itemsize or self.np.itemsize
        kind = kind or self.np.kind
        self.is_floating_point = kind == "f"
        self.is_complex = kind == "c"
        self.is_signed = kind in "fci" if signed is None else signed
        self.rank = rank  # position in the promotion lattice of the types with kernels
        self.short = short  # name in printed IR: f32, i64, ...
        self.has_kernels = rank is not None

    def __repr__(self) -> str:
        return f"eager.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))

    @property
    def category(self) -> int:
        """0 for bool, 1 for integers, 2 for floating point."""
        if self.is_floating_point:
            return 2
        return 0 if self is bool_ else 1


bool_ = DType("bool", np.bool_, 0, "b8")
uint8 = DType("uint8", np.uint8, 1, "u8")
int8 = DType("int8", np.int8, 1, "i8")
int16 = DType("int16", np.int16, 2, "i16")
int32 = DType("int32", np.int32, 3, "i32")
int64 = DType("int64", np.int64, 4, "i64")
float16 = DType("float16", np.float16, 5, "f16")
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, 5, "bf16", kind="f")
float32 = DType("float32", np.float32, 6, "f32")
float64 = DType("float64", np.float64, 7, "f64")

# PyTorch's dtypes that kiln names but has no kernels for yet
uint16 = DType("uint16", np.uint16, None, "u16")
uint32 = DType("uint32", np.uint32, None, "u32")
uint64 = DType("uint64", np.uint64, None, "u64")
complex32 = DType("complex32", None, None, "c32", kind="c", itemsize=4)
complex64 = DType("complex64", np.complex64, None, "c64")
complex128 = DType("complex128", np.complex128, None, "c128")
float8_e4m3fn = DType("float8_e4m3fn", None, None, "f8e4m3fn", kind="f", itemsize=1)
float8_e4m3fnuz = DType("float8_e4m3fnuz", None, None, "f8e4m3fnuz", kind="f", itemsize=1)
float8_e5m2 = DType("float8_e5m2", None, None, "f8e5m2", kind="f", itemsize=1)
float8_e5m2fnuz = DType("float8_e5m2fnuz", None, None, "f8e5m2fnuz", kind="f", itemsize=1)
float8_e8m0fnu = DType("float8_e8m0fnu", None, None, "f8e8m0fnu", kind="f", itemsize=1,
                       signed=False)
float4_e2m1fn_x2 = DType("float4_e2m1fn_x2", None, None, "f4e2m1fnx2", kind="f", itemsize=1)

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
HALF = (float16, bfloat16)  # the 16-bit floats: computed in float32, rounded once
NAMED_ONLY = (uint16, uint32, uint64, complex32, complex64,
              complex128, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
              float8_e8m0fnu, float4_e2m1fn_x2)
_BY_NAME = {d.name: d for d in ALL + NAMED_ONLY}
_BY_SHORT = {d.short: d for d in ALL + NAMED_ONLY}
_BY_NP = {d.np: d for d in ALL}
_ALIASES = {"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
            "short": int16, "cfloat": complex64, "cdouble": complex128, "chalf": complex32}

_default_dtype = float32


def from_name(name: str) -> DType:
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name in _ALIASES:
        return _ALIASES[name]
    if name in _BY_SHORT:
        return _BY_SHORT[name]
    raise TypeError(f"unknown dtype {name!r}; kiln supports {', '.join(_BY_NAME)}")


def from_numpy(np_dtype) -> DType:
    """The dtype with kernels that holds numpy's `np_dtype` (see named_only_of_numpy)."""
    dt = _BY_NP.get(np.dtype(np_dtype))
    if dt is None:
        raise TypeError(
            f"can't convert numpy array of type {np.dtype(np_dtype)}: kiln supports "
            f"{', '.join(d.np.name for d in ALL)}")
    return dt


def named_only_of_numpy(np_dtype) -> DType | None:
    """The dtype kiln names but has no kernels for that holds numpy's `np_dtype`, if any."""
    return _NAMED_ONLY_BY_NP.get(np.dtype(np_dtype))


_NAMED_ONLY_BY_NP = {d.np: d for d in NAMED_ONLY if d.np is not None}


# PyTorch's words for the types: its error messages (Float, Long) and legacy tensor types
# (torch.BFloat16Tensor)
TYPE_WORDS = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
              "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
              "uint8": "Byte", "bool": "Bool"}
# c10's names of the types, as PyTorch's conversion errors spell them
_C_NAMES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int",
            "int64": "int64_t", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
            "float32": "float", "float64": "double", "bool": "bool"}


def fits_integer(value, dt: DType) -> bool:
    """Whether Python number `value` converts to integer type `dt` without overflow, as
    c10 judges it: within the type's range, where an unsigned type also takes the negative
    integers down to -max (wrapping, as C does: -1 is 255 in uint8) but no negative float;
    NaN and inf fit nowhere."""
    info = np.iinfo(dt.np)
    low = int(info.min) if info.min or isinstance(value, (float, np.floating)) else \
        -int(info.max)
    return low <= value <= int(info.max)


def checked_scalar(value, dt: DType) -> np.ndarray:
    """Python number `value` as a zero-dim array of `dt`, refused (RuntimeError) where
    PyTorch's Scalar conversion (c10::checked_convert) overflows, as fill_, full, clamp's
    bounds and where's and masked_fill's values do: what does not fit an integer type
    (fits_integer), a finite number beyond a float type's largest. Within range, a
    float into an integer truncates; into a 16-bit float it rounds through float32."""
    if dt is bool_:
        return np.asarray(bool(value))
    target = dt.np
    if dt.is_floating_point:
        f = float(value)
        overflows = math.isfinite(f) and abs(f) > float(ml_dtypes.finfo(target).max)
    else:
        overflows = not fits_integer(value, dt)
        f = math.trunc(value) if not overflows else 0
    if overflows:
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES[dt.name]} without "
                           f"overflow")
    if dt.is_floating_point:
        return cast(np.asarray(f), dt)
    return np.asarray(f).astype(target)  # (a negative number into an unsigned type wraps)


def get_default_dtype() -> DType:
    return _default_dtype


def set_default_dtype(dtype: DType) -> None:
    global _default_dtype
    if not dtype.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {dtype}")
    _default_dtype = dtype


def promote_types(a: DType, b: DType) -> DType:
    """The smallest type both a and b convert to without losing category: PyTorch's
    table over the types with kernels. `rank` orders them by category, then width;
    two types of one rank (uint8 and int8, float16 and bfloat16) meet one step up."""
    if a is b:
        return a
    if a.rank != b.rank:
        return a if a.rank > b.rank else b
    return float32 if a.is_floating_point else int16


_F32, _I32 = np.dtype(np.float32), np.dtype(np.int32)
_EXACT_TYPES = frozenset({bool_, uint8, int8})
"""The types whose every value either 16-bit float holds exactly."""
_EXACT_IN_HALF = frozenset(t.np for t in (*_EXACT_TYPES, *HALF, float32))
"""The numpy types a 16-bit float is made from in one rounding (the others through
float32 first, as c10 makes them)."""


def cast(a: np.ndarray, dt: DType) -> np.ndarray:
    """numpy array `a` converted to `dt`'s numpy type as PyTorch converts (a new array,
    or `a` itself where it is of that type already):
    - to a 16-bit float through float32, as c10's Half and BFloat16 are made from a
      float: a float64 or a wide integer rounds twice (1 + 2**-11 + 2**-40 is 1.0 in
      float16 as in PyTorch, where numpy's direct rounding gives 1.001);
    - a float to a narrow integer (int8, int16, uint8) through int32 and truncation, as
      PyTorch's static_cast on x86 gives it: 200.5 -> int8 -56, NaN, inf and 1e10 -> 0."""
    target = dt.np
    src = a.dtype
    if src is target or src == target:
        return a
    with np.errstate(invalid="ignore", over="ignore"):
        if src.itemsize == 2 and src.kind in "fV" and not dt.is_floating_point and \
                dt is not bool_:  # a 16-bit float into an integer: as its float32
            a, src = a.astype(_F32), _F32
        if dt in HALF and src not in _EXACT_IN_HALF:
            a = a.astype(_F32)
        elif target.itemsize < 4 and not dt.is_floating_point and dt is not bool_ and \
                src.kind == "f":  # (a 16-bit float is float32 by now)
            a = a.astype(_I32)
        return a.astype(target)


def scalar_dtype(value) -> DType:
    """The dtype a Python number takes when it stands alone as a tensor."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    if isinstance(value, (float, np.floating)):
        return _default_dtype
    raise TypeError(f"expected a Python number, got {type(value).__name__}")


def _combine_categories(higher: DType | None, lower: DType | None) -> DType | None:
    if higher is None:
        return lower
    if lower is None or higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def rounded_first(operand: DType, common: DType) -> bool:
    """Whether a pointwise op's operand of type `operand` is rounded to the op's common
    type `common` before the op computes. PyTorch's CPU ops cast each input to the common
    type, then compute a 16-bit float in float32: bfloat16 x + 1.7 adds 1.703125, x > 1.7
    compares with 1.703125, and an int16 tensor's 257 beside bfloat16 is 256. kiln's
    kernels compute a 16-bit float op in float32 from operands of any type, so they round
    such operands first (eager's elementwise kernels, the compiler's decompose pass).
    Other common types compute in their own type already; bool, uint8 and int8 are
    exact in either 16-bit float. (mul and div read a zero-dim second operand as it is,
    records.Pointwise.wide_scalar.)"""
    return common in HALF and operand is not common and operand not in _EXACT_TYPES


def result_type(dim_dtypes=(), zero_dim_dtypes=(), wrapped_dtypes=()) -> DType:
    """PyTorch's result type of an op over tensors with dims, zero-dim tensors and
    wrapped Python numbers (given as the dtypes scalar_dtype assigns them)."""
    tiers = []
    for group in (dim_dtypes, zero_dim_dtypes, wrapped_dtypes):
        acc = None
        for d in group:
            acc = d if acc is None else promote_types(acc, d)
        tiers.append(acc)
    out = _combine_categories(tiers[0], _combine_categories(tiers[1], tiers[2]))
    if out is None:
        raise ValueError("result_type needs at least one operand")
    return out
