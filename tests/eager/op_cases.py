"""What the op tests share: the OpCase record, seeded sample makers, conversion of numpy
samples to eager / meta / torch tensors in several memory layouts, and the comparison
of a result with its numpy reference at the result dtype's tolerance.

An OpCase's `fn(lib, *args, **kwargs)` is spelled the same for `lib = eager` and
`lib = torch`, so one table drives the numpy checks, the Meta checks and the PyTorch
parity checks.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Callable

import numpy as np

import eager
from ir.ops import Op

FLOATS = ("float32", "float64", "float16")
INTS = ("int32", "int64")
NUMBERS = FLOATS + INTS
ALL = NUMBERS + ("bool",)
# the narrow types, checked against PyTorch in the layout samples are made in: a case over
# float16 runs in bfloat16 too, one over int32 in int8, int16 and uint8
NARROW = {"float16": ("bfloat16",), "int32": ("int8", "int16", "uint8")}
EVERY = ALL + ("bfloat16", "int8", "int16", "uint8")
LAYOUTS = ("contiguous", "transposed", "strided", "expanded")

# (rtol, atol) per result dtype. The reference is float64 over the same (rounded) inputs,
# so a correct kernel is off only by its own rounding.
TOLERANCE = {"float16": (1e-3, 1e-4), "bfloat16": (8e-3, 1e-3), "float32": (1e-5, 1e-5),
             "float64": (1e-10, 1e-12)}


@dataclasses.dataclass(frozen=True)
class Sample:
    args: tuple
    kwargs: dict

    def __repr__(self) -> str:
        def show(v):
            if isinstance(v, np.ndarray):
                return f"{v.dtype}{list(v.shape)}"
            if isinstance(v, (list, tuple)) and any(isinstance(x, np.ndarray) for x in v):
                return "[" + ", ".join(show(x) for x in v) + "]"
            return repr(v)
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"


def S(*args, **kwargs) -> Sample:
    return Sample(args, kwargs)


@dataclasses.dataclass(frozen=True)
class OpCase:
    name: str
    ops: tuple[Op, ...]  # the ir ops this case runs
    fn: Callable  # fn(lib, *args, **kwargs) with lib = eager or torch
    ref: Callable  # numpy reference over float64 arrays, same arguments
    samples: Callable  # samples(make) -> iterable of Sample
    dtypes: tuple = FLOATS
    layouts: tuple = LAYOUTS
    meta: bool = True  # False where the output shape depends on the data (t[mask])
    tolerance: dict = dataclasses.field(default_factory=dict)  # per-dtype overrides

    def __repr__(self) -> str:
        return self.name


class Maker:
    """Seeded sample arrays of one dtype: small integers, standard normal floats, or
    random bools; `positive=True` keeps values in the domain of log / sqrt / pow."""

    def __init__(self, dtype: str, seed: int = 0):
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)

    def __call__(self, shape, positive: bool = False, scale: float = 1.0) -> np.ndarray:
        if self.dtype == np.bool_:
            return self.mask(shape)
        if self.dtype.kind in "iu":
            low = 1 if positive else 0 if self.dtype.kind == "u" else -5
            return np.asarray(self.rng.integers(low, 6, size=shape), self.dtype)
        a = self.rng.standard_normal(shape) * scale
        if positive:
            a = np.abs(a) + 0.5
        return np.array(a, self.dtype)  # an array even for shape ()

    def index(self, shape, high: int) -> np.ndarray:
        return np.asarray(self.rng.integers(0, high, size=shape), np.int64)

    def mask(self, shape) -> np.ndarray:
        return np.asarray(self.rng.random(shape) < 0.5)


def aten(lib):
    """The aten namespace of `lib`: torch.ops.aten, or eager's op handles by schema name."""
    if lib.__name__ == "torch":
        return lib.ops.aten
    from eager.tensor import ops
    return ops


# converting samples ---------------------------------------------------------------------
def expand_values(a: np.ndarray) -> np.ndarray:
    """`a` made constant along dim 0, so that a size-1 tensor expanded can hold it."""
    return np.broadcast_to(a[:1], a.shape) if a.ndim else a


def to_eager(a: np.ndarray, layout: str = "contiguous"):
    """An eager tensor holding `a`'s values in the given memory layout."""
    if layout == "contiguous" or a.ndim == 0:
        return eager.tensor(a)
    if layout == "transposed":  # stored with the dims reversed, then permuted back
        stored = eager.tensor(a.transpose())  # tensor() copies in C order
        return stored.permute(*reversed(range(a.ndim)))
    if layout == "strided":  # every other element of a buffer twice as wide
        buffer = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        buffer[..., ::2] = a
        return eager.tensor(buffer)[..., ::2]
    if layout == "expanded":  # one row, expanded (stride 0) along dim 0
        return eager.tensor(a[:1]).expand(*a.shape)
    raise ValueError(layout)


def to_meta(a: np.ndarray):
    return eager.empty(a.shape, dtype=getattr(eager, a.dtype.name), device="meta")


def to_torch(a: np.ndarray):
    import torch
    if a.dtype == eager.bfloat16.np:  # torch takes no ml_dtypes array: the words, viewed
        return torch.from_numpy(np.array(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def to_reference(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind in "fV" else np.asarray(a)


def convert(value, to):
    """Apply `to` to every array in a (possibly nested) sample value."""
    if isinstance(value, np.ndarray):
        return to(value)
    if isinstance(value, (list, tuple)):
        return type(value)(convert(v, to) for v in value)
    return value


def call(case: OpCase, lib, sample: Sample, to):
    args = convert(sample.args, to)
    kwargs = {k: convert(v, to) for k, v in sample.kwargs.items()}
    if isinstance(kwargs.get("dtype"), str):  # samples name dtypes; each lib has its own
        kwargs["dtype"] = getattr(lib, kwargs["dtype"])
    return case.fn(lib, *args, **kwargs)


def reference(case: OpCase, sample: Sample):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's var on too few values
        return case.ref(*convert(sample.args, to_reference),
                        **{k: convert(v, to_reference) for k, v in sample.kwargs.items()})


# comparing ------------------------------------------------------------------------------
def flat_outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_matches(case: OpCase, actual, expected, what: str) -> None:
    """Each output of `actual` (eager tensors) equals `expected` (numpy) in shape, and in
    value at the tolerance of the actual dtype."""
    actual, expected = flat_outputs(actual), flat_outputs(expected)
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected)):
        assert isinstance(got, eager.Tensor), f"{what}: output {i} is {type(got).__name__}"
        want = np.asarray(want)
        assert tuple(got.shape) == want.shape, f"{what}: output {i} shape {tuple(got.shape)}, " \
                                               f"expected {want.shape}"
        values = got.detach().numpy()
        name = got.dtype.name
        if name in TOLERANCE:  # against the reference rounded once to the result dtype
            rtol, atol = case.tolerance.get(name, TOLERANCE[name])
            with np.errstate(over="ignore"):
                want = want.astype(values.dtype).astype(np.float64)
            np.testing.assert_allclose(values.astype(np.float64), want,
                                       rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{what}: output {i}")
        else:
            np.testing.assert_array_equal(values, want.astype(values.dtype),
                                          err_msg=f"{what}: output {i}")


def samples_of(case: OpCase, dtype: str, layout: str = "contiguous") -> list[Sample]:
    """The case's samples for `dtype`, with values repeated along dim 0 for the expanded
    layout (expanding gives equal rows, so the reference must see them too)."""
    samples = list(case.samples(Maker(dtype)))
    if layout == "expanded":
        samples = [Sample(convert(s.args, expand_values),
                          {k: convert(v, expand_values) for k, v in s.kwargs.items()})
                   for s in samples]
    return samples


def narrow_cases(cases) -> list:
    """pytest params (case, dtype) over the narrow dtypes (NARROW) each case runs in."""
    import pytest
    return [pytest.param(case, narrow, id=f"{case.name}-{narrow}") for case in cases
            for dtype, narrows in NARROW.items() if dtype in case.dtypes for narrow in narrows]


def all_cases(cases, with_layouts: bool = False) -> list:
    """pytest params (case, dtype), or (case, dtype, layout), one per supported combination."""
    import pytest
    return [pytest.param(case, dtype, *((layout,) if with_layouts else ()),
                         id="-".join((case.name, dtype) + ((layout,) if with_layouts else ())))
            for case in cases for dtype in case.dtypes
            for layout in (case.layouts if with_layouts else (None,))]
