"""torch.finfo and torch.iinfo: the numeric limits of each dtype, with PyTorch's fields.

Floating-point limits of the IEEE-like formats come from their exponent and mantissa
widths (numpy has no bfloat16), so one formula serves all four; the float8 formats spend
their top codes on NaN (or have no sign, or no mantissa), so theirs are PyTorch's values,
tabled. Tests compare every field with PyTorch's.
"""
from __future__ import annotations

import math

from ir import dtypes
from ir.dtypes import DType

# exponent bits, mantissa bits (IEEE 754 binary16/32/64; bfloat16 is float32 cut to 7)
_FLOAT_LAYOUT = {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23),
                 dtypes.float64: (11, 52)}
# eps, max, tiny; min is -max (float8_e8m0fnu, unsigned, has min = tiny)
_FLOAT8 = {dtypes.float8_e4m3fn: (2.0 ** -3, 448.0, 2.0 ** -6),
           dtypes.float8_e4m3fnuz: (2.0 ** -3, 240.0, 2.0 ** -7),
           dtypes.float8_e5m2: (2.0 ** -2, 57344.0, 2.0 ** -14),
           dtypes.float8_e5m2fnuz: (2.0 ** -3, 57344.0, 2.0 ** -15),
           dtypes.float8_e8m0fnu: (1.0, 2.0 ** 127, 2.0 ** -127)}


class finfo:  # noqa: N801 - PyTorch's name
    """`finfo(dtype)`: bits, eps, max, min, tiny (= smallest_normal), resolution and the
    dtype's name, as Python numbers; `finfo()` is the default dtype's."""
    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                 "dtype")

    def __init__(self, type: DType | None = None):  # noqa: A002 - PyTorch's keyword
        dt = dtypes.get_default_dtype() if type is None else type
        if dt in _FLOAT8:
            self.bits = 8
            self.eps, self.max, self.tiny = _FLOAT8[dt]
            self.min = -self.max if dt.is_signed else self.tiny
        elif dt in _FLOAT_LAYOUT:
            exponent_bits, mantissa_bits = _FLOAT_LAYOUT[dt]
            bias = 2 ** (exponent_bits - 1) - 1
            self.bits = 1 + exponent_bits + mantissa_bits
            self.eps = 2.0 ** -mantissa_bits
            self.max = (2.0 - self.eps) * 2.0 ** bias
            self.min = -self.max
            self.tiny = 2.0 ** (1 - bias)
        else:
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        self.smallest_normal = self.tiny
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))
        self.dtype = dt.name

    def __eq__(self, other) -> bool:
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((finfo, self.dtype))

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:  # noqa: N801 - PyTorch's name
    """`iinfo(dtype)`: bits, min, max (Python ints) and the dtype's name."""
    __slots__ = ("bits", "min", "max", "dtype")

    def __init__(self, type: DType):  # noqa: A002 - PyTorch's keyword
        if type is dtypes.bool_:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if not isinstance(type, DType) or type.is_floating_point:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo "
                            "to handle 'torch.iinfo'")
        self.bits = 8 * type.itemsize
        self.min = -2 ** (self.bits - 1) if type.is_signed else 0
        self.max = 2 ** (self.bits - 1) - 1 if type.is_signed else 2 ** self.bits - 1
        self.dtype = type.name

    def __eq__(self, other) -> bool:
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((iinfo, self.dtype))

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
