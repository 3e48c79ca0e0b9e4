"""Special values through every unary and binary elementwise op, against PyTorch, on each
path kiln runs them: eager (numpy, and the generated kernels eager hands large tensors
to), compiled through the interpreter, and compiled to native code (in the haswell pass
too, .ci/run).

The ops are derived, so a new one is tested here unless a table below says why not:
- the pointwise records of one or two tensors (ir/records.py), called as ops;
- the functions written in other ops that eager.derived_math, eager.derived and
  nn.functional's activations list (a new one is called with one tensor unless
  COMPOSITE_ARITY says otherwise, or NOT_ELEMENTWISE that it is no elementwise function).

Each sees one tensor holding every special value (NaN, +-inf, +-0, the largest finite,
the smallest normal, subnormals, and +-0.5, +-1, +-2 where pow and the activations turn),
or, for two tensors, one pair of tensors holding every pair of them. A result must be
PyTorch's exactly where PyTorch's is NaN, infinite or zero (the sign of zero included),
and within ULPS units in the last place where it is finite and not zero: vmath's stated
bounds (runtime/cpu/vmath.py: at most 1.81 ulp) plus PyTorch's own rounding. A
numpy warning about a value (overflow, inf - inf) fails the test: PyTorch warns of none.

PyTorch's answer is taken for each element alone (its scalar loop): its vectorised loop
breaks a tie of -0.0 and +0.0 in maximum and minimum the other way (so its answer for
one element depends on where the element lies in the tensor), and its float32 gelu gives
inf at the largest float and NaN at inf, where its scalar loop, its float64 and kiln give
the largest float's gelu and inf.
"""
import numpy as np
import pytest

import compiler
import eager
from eager.backends.native import pointwise as eager_pointwise
from eager import derived, derived_math
from eager.dispatcher import ATEN
from eager.kernels import elementwise
from eager.nn import _activations
from ir.records import RECORDS, pointwise_ops
from ir.ops import Op
from runtime.llvm.jit import compiling_here
from tests.compiler.value_checks import ULPS, mismatches, not_native
from tests.eager.torch_parity import require_torch

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

NOT_COMPARED = {op: "integers and bools only: no special float values" for op in (
    Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR, Op.BITWISE_NOT)}
"""Unary and binary pointwise records left out, with the reason."""
ATTRIBUTES = {
    Op.CLAMP: ({"min": 0.0}, {"min": -0.0}, {"max": 0.0}, {"max": -0.0},
               {"min": -1.0, "max": 1.0}, {"min": 1.0, "max": -1.0},
               {"min": float("-inf"), "max": float("inf")}),
    Op.DIV_MODE: ({"rounding_mode": None}, {"rounding_mode": "trunc"},
                  {"rounding_mode": "floor"}),
    Op.GELU: ({}, {"approximate": "tanh"}),
    Op.ROUND: ({}, {"decimals": 2}, {"decimals": -1}),
    Op.GELU_BACKWARD: ({}, {"approximate": "tanh"}),
    Op.SOFTPLUS: ({}, {"beta": 2.0, "threshold": 5.0}, {"beta": -1.0}),
    Op.SOFTPLUS_BACKWARD: ({"beta": 1.0, "threshold": 20.0}, {"beta": 0.5, "threshold": 2.0}),
}
"""The attributes each record's op is called with (one call each); others take none."""
NOT_ELEMENTWISE = {
    **{name: "a reduction" for name in ("logsumexp", "norm", "count_nonzero", "all", "any",
                                        "cumsum", "cumprod", "softmin", "normalize",
                                        "cosine_similarity", "pairwise_distance", "trace")},
    **{name: "moves, selects or sorts elements" for name in (
        "tril", "triu", "flip", "fliplr", "flipud", "roll", "unbind", "diff",
        "take_along_dim", "diagonal", "diag", "masked_select", "sort", "argsort", "topk",
        "kthvalue", "unique", "glu")},
    **{name: "not a tensor of values: a bool, counts or indices" for name in (
        "equal", "allclose", "bincount", "bucketize", "multinomial")},
    "outer": "a product of every pair (of vectors)", "inner": "a product (of vectors)",
    "lerp": "three tensors", "prelu": "a weight per channel", "softplus_of": "softplus's "
    "part, compared as softplus", "rrelu": "random slopes in training; leaky_relu in eval",
}
"""Functions the composite lists name that are no elementwise function of one or two
tensors, with the reason."""
COMPOSITE_ARITY = {"isclose": 2, "logical_or": 2, "logical_xor": 2, "float_power": 2}
COMPOSITE_ARGUMENTS = {"threshold": (0.5, -2.0)}
"""Numbers a composite takes after its tensors."""
PYTORCH_DIFFERS = {
    "log1p": (lambda x: np.abs(x) == np.finfo(x.dtype).smallest_subnormal, np.log1p,
              "PyTorch 2.13 gives 0.0 for log1p of the smallest subnormal (of a larger "
              "subnormal, the value itself, which log1p rounds to)"),
    "logaddexp2": (lambda a, b: (a == b) & np.isfinite(a), np.logaddexp2,
                   "PyTorch's max + log1p(2^-|a - b|) * (1 / ln 2) runs as one FMA, so where "
                   "a == b, ln 2 times its rounded reciprocal is not 1: logaddexp2(-1, -1) "
                   "is -4.8e-17 there, not 0"),
}
"""Where PyTorch's answer is wrong: a test of the inputs, the numpy function kiln is
compared with there instead (in float64, rounded to the type), and why."""
ULPS_OF = {
    "tanhshrink": (24, "x - tanh(x) at |x| = 0.5 is 13 times smaller than tanh(x): an ulp "
                       "of tanh (numpy's float32 tanh is 2 ulp off there, PyTorch's float64 "
                       "one 1) becomes 13"),
    "gelu-approximate=tanh": (24, "1 + tanh(u) at x = -2 is 20 times smaller than 1: numpy's "
                                  "float32 tanh (2 ulp off) and PyTorch's are both amplified"),
    "gelu_backward-approximate=tanh": (24, "as gelu's: 1 + tanh(u) at x = -2"),
}
"""Functions whose formula (PyTorch's too) cancels at +-0.5 or +-2, so an ulp of a part
becomes many of the result, with the budget and the reason."""
PATHS = ("eager", "eager kernels", "interpreted", "native")


def _tensor_count(op: Op) -> int:
    return sum(a.type.base == "Tensor" for a in op.schema.arguments)


class Case:
    """One function to compare: kiln's and PyTorch's as functions of `arity` tensors."""

    def __init__(self, name, arity, kiln, torch_fn, op=None, attrs=None):
        self.name, self.arity, self.kiln, self.torch_fn = name, arity, kiln, torch_fn
        self.op, self.attrs = op, attrs or {}

    def __repr__(self) -> str:
        return self.name + "".join(f"-{k}={v}" for k, v in self.attrs.items())


def _record_cases() -> list[Case]:
    cases = []
    for op in sorted(pointwise_ops(), key=lambda op: op.name):
        if _tensor_count(op) not in (1, 2) or op in NOT_COMPARED:
            continue
        for attrs in ATTRIBUTES.get(op, ({},)):
            cases.append(Case(op.schema.name, _tensor_count(op),
                              lambda *ts, op=op, attrs=attrs: ATEN[op](*ts, **attrs),
                              lambda torch, op=op, attrs=attrs: lambda *ts: getattr(
                                  torch.ops.aten, op.schema.name)(*ts, **attrs), op, attrs))
    return cases


COMPOSITE_LISTS = {"eager": derived_math.FUNCTIONS + derived.FUNCTIONS,
                   "nn.functional": _activations.__all__}


def _composite_cases() -> list[Case]:
    cases = []
    for where, names in COMPOSITE_LISTS.items():
        for name in sorted(set(names) - set(NOT_ELEMENTWISE)):
            def lib_fn(lib, name=name, where=where):
                space = lib if where == "eager" else lib.nn.functional
                more = COMPOSITE_ARGUMENTS.get(name, ())
                return lambda *ts: getattr(space, name)(*ts, *more)
            cases.append(Case(name, COMPOSITE_ARITY.get(name, 1), lib_fn(eager), lib_fn))
    return cases


CASES = _record_cases() + _composite_cases()


def special_values(dtype: str) -> np.ndarray:
    info = np.finfo(dtype)
    positive = [info.smallest_subnormal, info.smallest_normal - info.smallest_subnormal,
                info.smallest_normal, 0.5, 1.0, 2.0, info.max, np.inf]
    return np.array([np.nan, 0.0, *positive, -0.0, *(-v for v in positive)], dtype)


def operands(case: Case, dtype: str) -> list[np.ndarray]:
    """The special values, or every pair of them as two arrays."""
    values = special_values(dtype)
    if case.arity == 1:
        return [values]
    return [np.repeat(values, len(values)), np.tile(values, len(values))]


def torch_reference(case: Case, arrays: list[np.ndarray]) -> np.ndarray:
    """PyTorch's result for each element alone; numpy's where PYTORCH_DIFFERS says."""
    torch = require_torch()
    fn = case.torch_fn(torch)
    want = np.concatenate([fn(*(torch.from_numpy(a[i:i + 1]) for a in arrays)).numpy()
                           for i in range(len(arrays[0]))])
    if case.name in PYTORCH_DIFFERS:
        wrong, numpy_fn, _ = PYTORCH_DIFFERS[case.name]
        with np.errstate(all="ignore"):
            exact = numpy_fn(*(a.astype(np.float64) for a in arrays)).astype(want.dtype)
        want = np.where(wrong(*arrays), exact, want)
    return want


def run(path: str, fn, arrays: list[np.ndarray]) -> np.ndarray:
    tensors = [eager.tensor(a) for a in arrays]
    if path == "eager":
        return fn(*tensors).numpy()
    if path == "eager kernels":  # repeated up to the size eager runs generated code from
        copies = -(-elementwise.NATIVE_ELEMENTS // len(arrays[0]))
        before = eager_pointwise.calls
        with compiling_here():
            out = fn(*(eager.tensor(np.tile(a, copies)) for a in arrays)).numpy()
        assert eager_pointwise.calls == before + 1, "eager did not run a generated kernel"
        return out[:len(arrays[0])]
    if path == "interpreted":
        return compiler.compile(fn, backend="eager")(*tensors).numpy()
    cf = compiler.compile(fn, backend="native")
    lowered = compiler.lower(cf, *tensors)  # (its kernels compiled here, not in workers)
    out = cf(*tensors).numpy()
    assert not not_native(cf, lowered), not_native(cf, lowered)
    return out


def _runs_eager_kernels(case: Case) -> bool:
    """Whether eager hands the record's op to a generated kernel from NATIVE_ELEMENTS on
    (numbers among its attributes keep numpy: eager_pointwise)."""
    if case.op is None:
        return False
    least, _ = elementwise._native_elements(RECORDS[case.op]).get(eager.float32, (None, 0))
    return least == elementwise.NATIVE_ELEMENTS and all(isinstance(v, str)
                                                        for v in case.attrs.values())


def _generated(case: Case) -> bool:
    """Whether the compiler generates code for the case's op: one whose record has no
    emitter (sin, cos) runs its eager kernel inside compiled graphs, on NOT_NATIVE with
    the reason in test_native_coverage.py, and its 'interpreted' path is this one."""
    return case.op is None or RECORDS[case.op].pointwise.emit is not None


@pytest.mark.parametrize("case, dtype, path", [
    pytest.param(case, dtype, path, id=f"{case!r}-{dtype}-{path.replace(' ', '_')}")
    for case in CASES for dtype in ("float32", "float64") for path in PATHS
    if (path != "eager kernels" or _runs_eager_kernels(case))
    and (path != "native" or _generated(case))])
def test_special_values_give_what_pytorch_gives(case, dtype, path):
    arrays = operands(case, dtype)
    want = torch_reference(case, arrays)
    got = run(path, case.kiln, arrays)
    assert got.dtype == want.dtype, f"{got.dtype}, PyTorch {want.dtype}"
    bad = np.flatnonzero(mismatches(got, want, ULPS_OF.get(repr(case), (ULPS,))[0]))
    attrs = [f"{k}={v}" for k, v in case.attrs.items()]
    assert not len(bad), "\n".join(
        f"{case.name}({', '.join([repr(a[i]) for a in arrays] + attrs)}): {got[i]!r}, "
        f"PyTorch {want[i]!r}" for i in bad[:20]) + f"\n({len(bad)} of {len(got)} differ)"


def test_the_tables_name_only_what_they_are_about_with_reasons():
    for op in NOT_COMPARED:
        assert op in pointwise_ops() and _tensor_count(op) in (1, 2), op
    listed = {name for names in COMPOSITE_LISTS.values() for name in names}
    for name in {**NOT_ELEMENTWISE, **COMPOSITE_ARITY, **COMPOSITE_ARGUMENTS}:
        assert name in listed, f"{name} is in no composite list"
    assert set(PYTORCH_DIFFERS) <= {case.name for case in CASES}
    assert set(ULPS_OF) <= {repr(case) for case in CASES}
    assert all(NOT_COMPARED.values()) and all(NOT_ELEMENTWISE.values())
    assert all(why for _, _, why in PYTORCH_DIFFERS.values())
    assert all(why for _, why in ULPS_OF.values())


def test_ops_with_required_attributes_are_given_them():
    for case in CASES:
        if case.op is not None:
            required = [a.name for a in case.op.schema.arguments[case.arity:]
                        if not a.has_default]
            assert not required or case.op in ATTRIBUTES, \
                f"{case.op!r} needs {required}: add it to ATTRIBUTES"
