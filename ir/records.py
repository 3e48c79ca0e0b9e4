"""Op records: what kiln knows of one op besides its schema (ir/ops.py), declared in one
place, beside the op's kernel in its family file (eager/kernels/<family>.py):

    EXP = declare(Op.EXP, function=True, method=True,
                  pointwise=Pointwise("float", np.exp, emit=lambda E, x: E.math("exp", x)))

    @EXP.derivative("ExpBackward0", "self", save="result")
    def _(ctx, g):
        return g * ctx.result

- names: `eager.exp` (function), `Tensor.exp` (method), `eager.nn.functional.exp`
  (functional); True means the schema's name;
- `pointwise`: for an op that computes each output element from the input elements at the
  same position: its dtype rule, its numpy function (the CPU kernel is made from it), and
  its code emitter, a function of the compiler's element toolkit `E` and the input values
  (runtime/cpu/values.py: E.add, E.select, E.math("exp", x), ...), so eager never
  imports the code generator; `float_only` (PyTorch has no integer kernel), `activations`
  (the names a GEMM's store applies it under, with the attributes each stands for);
- `derivative`: the op's backward rule (eager/autograd reads them; see Derivative);
- `decomposition`: a composite op's formula in simpler ops, written once over an
  interpreter (ir/formula.py): the compiler's decompose pass, eager's row kernels,
  CUDA's composed kernels and eager's numpy fallbacks all run this one definition;
- `inplace_of`: an in-place op's out-of-place twin, whose derivative it uses;
  `inplace=Op.TAN_` on the twin's declaration records the in-place form with it;
- `aliases`: PyTorch's other names for it (arcsin, fix), given wherever it has a function
  or a method name.

Every table a layer needs (eager's functions and Tensor methods, the native op set, the
float-only set, the GEMM's activations, the decompositions) is derived from RECORDS,
never kept beside it.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable, NamedTuple

from ir.ops import Op


# Records are NamedTuples: immutable values as a frozen dataclass is, and ~0.06 ms to
# define where a frozen dataclass takes ~0.35 ms (`import eager` is a benchmark)
class Derivative(NamedTuple):
    """An op's backward rule. `inputs` names the differentiable arguments; the formula
    returns one gradient (or None) for each, in order (a Tensor[] argument contributes one
    per element). `save` names what backward needs: arguments, `result` (the output),
    `result1`, `result2` (a second, a third output), or `<arg>_sizes` / `<arg>_dtype` /
    `<arg>_device` when only that fact is needed. Formulas are written in eager ops, so backward is itself a
    run of ordinary ops: it can be differentiated again (create_graph=True) and traced by
    the compiler. Where one kiln op stands for several PyTorch overloads (`x.sum()` and
    `x.sum(1)`), `overloads` maps the node name PyTorch gives an overload to a test of the
    bound arguments. `every_output`: each floating output of the op is an output of the
    node (var_mean's two), and the formula's `g` is {output position: gradient}, holding
    those that received one; otherwise only the first output is differentiable."""
    op: Op
    name: str
    inputs: tuple[str, ...]
    save: tuple[str, ...]
    formula: Callable
    overloads: tuple[tuple[str, Callable[[dict], bool]], ...] = ()
    every_output: bool = False


POINTWISE_RULES = ("same", "float", "promote", "divide", "compare", "logical", "power")
"""Dtype rules of pointwise ops: the input's type (same), a float for integer inputs
(float), the promoted type (promote), a float of the promoted type (divide), bool from
the promoted inputs (compare), bool from bools (logical), promote with pow's checks."""


class Pointwise(NamedTuple):
    """A pointwise op: `numpy(*arrays, **attrs)` computes it on arrays in the compute type
    (the result type; the promoted inputs' for comparisons), `emit(E, *values, **attrs)`
    in generated code (None: not generated). `float_only` names the kernel in PyTorch's
    error for integer inputs (its last tensor argument is checked); `float_math`: the
    emitter computes in floats only (pow of integers is not generated). `dtype` replaces
    the rule's result type and `check(dtype, *tensors, **attrs)` raises for bad input
    (`check_attrs`: only in the attributes, so a call without any skips it).
    `quiet`: numpy gives no warning computing it for any input (where's selection; not
    add, which warns at a float overflow and at inf - inf), so the kernel saves the cost
    of silencing them. `scaled` names an attribute (add's and sub's alpha) that
    multiplies the last tensor before `numpy` and `emit` see the values: they take the
    tensors only, and numpy can be a ufunc; the product can overflow, so a scaled op is
    not quiet. `not_on_cuda`: why the emitter has no CUDA form (the CUDA backend registers
    no kernel for the op). `number_forms`: (position, number, form, dtypes) where the
    tensor at `position` being that Python number makes the op `form` of the other
    tensor for results of `dtypes` (names): an Op of it, or `form(apply, x)`, which
    computes with `apply(op, *operands)` (an operand is a value or a Python number).
    pow(x, 0.5) is sqrt(x), as PyTorch's pow.Tensor_Scalar runs it (sqrt(-inf) is NaN
    where C's pow gives inf); pow(x, 3) is x * x * x, each product rounded. Eager's kernel
    and the compiler's simplification both use them. `own_half`: float16 and bfloat16 compute in their own
    type, each step rounded, as PyTorch's kernel does (div's trunc and floor modes: the
    quotient rounded before it is truncated), where others compute in float32 and round
    once. `wide_scalar`: a zero-dim second operand (a Python number) beside 16-bit
    floats is read as it is, in float32 (mul and div: PyTorch's original_scalar_value),
    where every other op first rounds each operand to the common type, as PyTorch's
    TensorIterator casts its inputs (bfloat16 x + 1.7 adds 1.703125)."""
    rule: str
    numpy: Callable
    emit: Callable | None = None
    float_only: str = ""
    float_math: bool = False
    activations: tuple[tuple[str, tuple], ...] = ()  # (GEMM store name, attrs)
    dtype: Callable | None = None
    check: Callable | None = None
    check_attrs: bool = False  # check reads only the attributes: none given, none to run
    quiet: bool = False  # numpy never warns on it: run without silencing them (~0.2 us)
    scaled: str = ""
    not_on_cuda: str = ""
    number_forms: tuple[tuple[int, float, Op | Callable, frozenset], ...] = ()
    own_half: bool = False
    wide_scalar: bool = False


class OpRecord:
    """One op's names, pointwise facts, derivative, decomposition and in-place twin."""

    def __init__(self, op: Op, function: str | None, method: str | None,
                 functional: str | None, pointwise: Pointwise | None, inplace_of: Op | None,
                 differentiable: bool, formula: Callable | None = None,
                 aliases: tuple[str, ...] = ()):
        self.aliases = aliases
        self.op, self.function, self.method, self.functional = op, function, method, functional
        self.pointwise, self.inplace_of, self.differentiable = pointwise, inplace_of, \
            differentiable
        self.rule: Derivative | None = None
        self.formula = formula  # the decomposition, `formula(F, *args, **kwargs)`

    def derivative(self, name: str, inputs: str, save: str = "",
                   overloads: dict[str, Callable[[dict], bool]] | None = None,
                   every_output: bool = False):
        """Decorator: the formula below is this op's backward rule, its node `name`."""
        def register(formula):
            if self.rule is not None:
                raise ValueError(f"{self.op!r} has a derivative already")
            self.rule = Derivative(self.op, name, tuple(inputs.split()), tuple(save.split()),
                                   formula, tuple((overloads or {}).items()), every_output)
            return formula
        return register

    def decomposition(self, formula: Callable) -> Callable:
        """Decorator: `formula(F, *args, **kwargs)` computes this op in simpler ones,
        over the interpreter F (ir/formula.py)."""
        if self.formula is not None:
            raise ValueError(f"{self.op!r} has a decomposition already")
        self.formula = formula
        _edits[0] += 1
        return formula

    def __repr__(self) -> str:
        return f"OpRecord({self.op!r})"


RECORDS: dict[Op, OpRecord] = {}
_DECLARED_IN: dict[str, None] = {}  # the modules that declared records, in order
_edits = [0]  # records declared or given a decomposition: the derived tables' version


def declare(op: Op, *, function: bool | str = False, method: bool | str = False,
            functional: bool | str = False, pointwise: Pointwise | None = None,
            inplace_of: Op | None = None, differentiable: bool = True,
            decomposition: Callable | None = None, aliases: tuple[str, ...] = (),
            inplace: Op | None = None, inplace_function: bool = False) -> OpRecord:
    """Record `op`; a name given as True is the schema's. `differentiable=False`: its
    outputs never carry a gradient (integer or boolean results, detach).
    `decomposition`: as the decorator OpRecord.decomposition, for a formula the record's
    own pointwise facts are made from (gelu_backward's numpy function and emitter).
    `inplace`: the op's in-place form (tan_), recorded too: a Tensor method (and a
    function with `inplace_function`, as torch.sin_ is), its aliases the op's with "_";
    differentiable (it writes self's type: x.eq_(y) of a float x has a zero gradient)."""
    module = sys._getframe(1).f_globals.get("__name__", "")
    record = _record(module, op, function, method, functional, pointwise, inplace_of,
                     differentiable, decomposition, aliases)
    if inplace is not None:
        _record(module, inplace, inplace_function, True, False, None, op, True, None,
                tuple(alias + "_" for alias in aliases))
    return record


def _record(module: str, op: Op, function, method, functional, pointwise, inplace_of,
            differentiable, decomposition, aliases) -> OpRecord:
    if op in RECORDS:
        raise ValueError(f"{op!r} is declared twice")
    if pointwise is not None and pointwise.rule not in POINTWISE_RULES:
        raise ValueError(f"unknown pointwise rule {pointwise.rule!r}; one of {POINTWISE_RULES}")
    if pointwise is not None and pointwise.quiet and pointwise.scaled:
        raise ValueError(f"{op!r}: a scaled operand can overflow, so the op is not quiet")

    def name(given):
        return op.schema.name if given is True else (given or None)
    RECORDS[op] = OpRecord(op, name(function), name(method), name(functional), pointwise,
                           inplace_of, differentiable, decomposition, aliases)
    _DECLARED_IN.setdefault(module)
    _edits[0] += 1
    return RECORDS[op]


def declaring_modules() -> tuple[str, ...]:
    """The modules whose import declared the records there are: what another process
    imports to have them too (a background compile worker building a kernel's IR)."""
    return tuple(_DECLARED_IN)


def _derived(table):
    """A table derived from RECORDS, made again when records were declared (or given a
    decomposition) since it was last made (the layers below eager read them: they hold
    no copy made too early)."""
    made: list = [None, None]

    @functools.wraps(table)
    def current():
        if made[0] != _edits[0]:
            if not RECORDS:
                raise RuntimeError(f"{table.__name__}(): no op records are declared yet; "
                                   f"they are declared by `import eager`")
            made[:] = _edits[0], table()
        return made[1]
    return current


# derived tables -------------------------------------------------------------------------
def named(kind: str) -> dict[str, Op]:
    """Python name -> op for "function", "method" or "functional" names (a function's or
    a method's aliases too)."""
    names = {}
    for op, r in RECORDS.items():
        if getattr(r, kind):
            names[getattr(r, kind)] = op
            if kind != "functional":
                names.update(dict.fromkeys(r.aliases, op))
    return names


@_derived
def pointwise_ops() -> dict[Op, Pointwise]:
    return {op: r.pointwise for op, r in RECORDS.items() if r.pointwise is not None}


@_derived
def float_only() -> frozenset[Op]:
    return frozenset(op for op, p in pointwise_ops().items() if p.float_only or p.float_math)


@_derived
def activations() -> dict[str, tuple[Op, dict]]:
    """GEMM store activation name -> (op, attributes), from the pointwise records."""
    return {name: (op, dict(attrs)) for op, p in pointwise_ops().items()
            for name, attrs in p.activations}


@_derived
def decompositions() -> dict[Op, Callable]:
    """Composite op -> its formula (ir/formula.py), from the records."""
    return {op: r.formula for op, r in RECORDS.items() if r.formula is not None}
