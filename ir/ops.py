"""The op vocabulary: every operator kiln knows, declared once with its schema.

Passes and lowerings match on `Op` members and the named groups below, never on
strings. `Op.MM.schema` is the parsed FunctionSchema; `Op.MM.aten` is the name the
profiler and dispatcher show (`aten::mm`).
"""
from __future__ import annotations

import enum
from functools import cached_property

from ir.schema import FunctionSchema, parse_schema

_BINARY = "(Tensor self, Tensor other) -> Tensor"
_UNARY = "(Tensor self) -> Tensor"
_INPLACE_BINARY = "(Tensor(a!) self, Tensor other) -> Tensor(a!)"
_INPLACE_UNARY = "(Tensor(a!) self) -> Tensor(a!)"


class Op(enum.Enum):
    # elementwise, unary
    NEG = "neg" + _UNARY
    EXP = "exp" + _UNARY
    LOG = "log" + _UNARY
    SQRT = "sqrt" + _UNARY
    RSQRT = "rsqrt" + _UNARY
    ABS = "abs" + _UNARY
    SIGN = "sign" + _UNARY
    TANH = "tanh" + _UNARY
    SIGMOID = "sigmoid" + _UNARY
    RELU = "relu" + _UNARY
    SILU = "silu" + _UNARY
    HARDSWISH = "hardswish" + _UNARY
    HARDSIGMOID = "hardsigmoid" + _UNARY
    ERF = "erf" + _UNARY
    ERFINV = "erfinv" + _UNARY
    LOG1P = "log1p" + _UNARY
    EXPM1 = "expm1" + _UNARY
    SIN = "sin" + _UNARY
    COS = "cos" + _UNARY
    TAN = "tan" + _UNARY
    ASIN = "asin" + _UNARY
    ACOS = "acos" + _UNARY
    ATAN = "atan" + _UNARY
    SINH = "sinh" + _UNARY
    COSH = "cosh" + _UNARY
    ASINH = "asinh" + _UNARY
    ACOSH = "acosh" + _UNARY
    ATANH = "atanh" + _UNARY
    EXP2 = "exp2" + _UNARY
    SINC = "sinc" + _UNARY
    DEG2RAD = "deg2rad" + _UNARY
    RAD2DEG = "rad2deg" + _UNARY
    FLOOR = "floor" + _UNARY
    CEIL = "ceil" + _UNARY
    ROUND = "round.decimals(Tensor self, *, int decimals=0) -> Tensor"
    TRUNC = "trunc" + _UNARY
    FRAC = "frac" + _UNARY
    SGN = "sgn" + _UNARY
    SIGNBIT = "signbit" + _UNARY
    BITWISE_NOT = "bitwise_not" + _UNARY
    GELU = 'gelu(Tensor self, *, str approximate="none") -> Tensor'
    GELU_BACKWARD = ('gelu_backward(Tensor grad_output, Tensor self, *, str approximate="none")'
                     " -> Tensor")
    SOFTPLUS = "softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"
    GLU = "glu(Tensor self, int dim=-1) -> Tensor"
    LOG_SIGMOID = "log_sigmoid(Tensor self) -> Tensor"
    LOG_SIGMOID_BACKWARD = ("log_sigmoid_backward(Tensor grad_output, Tensor self, "
                            "Tensor buffer) -> Tensor")
    SOFTPLUS_BACKWARD = ("softplus_backward(Tensor grad_output, Tensor self, Scalar beta,"
                         " Scalar threshold) -> Tensor")
    CLAMP = "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor"
    # (PyTorch's bounds are Tensor? here; eager.clamp gives a missing one as no bound)
    CLAMP_TENSOR = "clamp.Tensor(Tensor self, Tensor min, Tensor max) -> Tensor"
    NAN_TO_NUM = ("nan_to_num(Tensor self, float? nan=None, float? posinf=None, "
                  "float? neginf=None) -> Tensor")
    LOGIT = "logit(Tensor self, float? eps=None) -> Tensor"
    # elementwise, binary (Python numbers become wrapped zero-dim tensors)
    ADD = "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    SUB = "sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    MUL = "mul" + _BINARY
    DIV = "div" + _BINARY
    DIV_MODE = "div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor"
    FLOOR_DIVIDE = "floor_divide" + _BINARY
    POW = "pow(Tensor self, Tensor exponent) -> Tensor"
    MAXIMUM = "maximum" + _BINARY
    MINIMUM = "minimum" + _BINARY
    EQ = "eq" + _BINARY
    NE = "ne" + _BINARY
    LT = "lt" + _BINARY
    LE = "le" + _BINARY
    GT = "gt" + _BINARY
    GE = "ge" + _BINARY
    LOGICAL_AND = "logical_and" + _BINARY
    BITWISE_AND = "bitwise_and.Tensor" + _BINARY
    BITWISE_OR = "bitwise_or.Tensor" + _BINARY
    BITWISE_XOR = "bitwise_xor.Tensor" + _BINARY
    ATAN2 = "atan2" + _BINARY
    HYPOT = "hypot" + _BINARY
    LOGADDEXP = "logaddexp" + _BINARY
    LOGADDEXP2 = "logaddexp2" + _BINARY
    XLOGY = "xlogy.Tensor" + _BINARY
    FMOD = "fmod.Tensor" + _BINARY
    REMAINDER = "remainder.Tensor" + _BINARY
    COPYSIGN = "copysign.Tensor" + _BINARY
    NEXTAFTER = "nextafter" + _BINARY
    HEAVISIDE = "heaviside(Tensor self, Tensor values) -> Tensor"
    WHERE = "where(Tensor condition, Tensor self, Tensor other) -> Tensor"
    # elementwise, three tensors: self + value * tensor1 * tensor2 (or / tensor2)
    ADDCMUL = ("addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)"
               " -> Tensor")
    ADDCDIV = ("addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)"
               " -> Tensor")
    # reductions
    SUM = ("sum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)"
           " -> Tensor")
    MEAN = ("mean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)"
            " -> Tensor")
    AMAX = "amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"
    AMIN = "amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"
    MAX_DIM = ("max.dim(Tensor self, int dim, bool keepdim=False)"
               " -> (Tensor values, Tensor indices)")
    MIN_DIM = ("min.dim(Tensor self, int dim, bool keepdim=False)"
               " -> (Tensor values, Tensor indices)")
    ARGMAX = "argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"
    ARGMIN = "argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"
    VAR = ("var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,"
           " bool keepdim=False) -> Tensor")
    STD = ("std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,"
           " bool keepdim=False) -> Tensor")
    LINALG_VECTOR_NORM = ("linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, "
                          "bool keepdim=False, *, ScalarType? dtype=None) -> Tensor")
    VAR_MEAN = ("var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,"
                " bool keepdim=False) -> (Tensor, Tensor)")
    STD_MEAN = ("std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,"
                " bool keepdim=False) -> (Tensor, Tensor)")
    # (PyTorch's prod and prod.dim_int: dim None is the product of every element)
    PROD = ("prod(Tensor self, int? dim=None, bool keepdim=False, *, ScalarType? dtype=None)"
            " -> Tensor")
    SOFTMAX = "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"
    LOG_SOFTMAX = "log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"
    SOFTMAX_BACKWARD_DATA = ("_softmax_backward_data(Tensor grad_output, Tensor output, int dim,"
                             " ScalarType input_dtype) -> Tensor")
    LOG_SOFTMAX_BACKWARD_DATA = ("_log_softmax_backward_data(Tensor grad_output, Tensor output,"
                                 " int dim, ScalarType input_dtype) -> Tensor")
    NATIVE_LAYER_NORM = ("native_layer_norm(Tensor input, SymInt[] normalized_shape,"
                         " Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)")
    NATIVE_LAYER_NORM_BACKWARD = (
        "native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape,"
        " Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask)"
        " -> (Tensor, Tensor, Tensor)")
    NATIVE_GROUP_NORM = ("native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N,"
                         " SymInt C, SymInt HxW, int group, float eps)"
                         " -> (Tensor, Tensor, Tensor)")
    NATIVE_GROUP_NORM_BACKWARD = (
        "native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd,"
        " Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask)"
        " -> (Tensor, Tensor, Tensor)")
    # linear algebra
    DOT = "dot(Tensor self, Tensor tensor) -> Tensor"
    MV = "mv(Tensor self, Tensor vec) -> Tensor"
    MM = "mm(Tensor self, Tensor mat2) -> Tensor"
    BMM = "bmm(Tensor self, Tensor mat2) -> Tensor"
    ADDMM = ("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1)"
             " -> Tensor")
    LINEAR = "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
    MATMUL = "matmul(Tensor self, Tensor other) -> Tensor"
    # views: the result aliases the input's storage
    VIEW = "view(Tensor(a) self, SymInt[] size) -> Tensor(a)"
    RESHAPE = "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"
    TRANSPOSE = "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"
    T = "t(Tensor(a) self) -> Tensor(a)"
    PERMUTE = "permute(Tensor(a) self, int[] dims) -> Tensor(a)"
    EXPAND = "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"
    UNSQUEEZE = "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"
    SQUEEZE = "squeeze.dims(Tensor(a) self, int[1]? dim=None) -> Tensor(a)"
    SELECT = "select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"
    SLICE = ("slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None,"
             " SymInt step=1) -> Tensor(a)")
    FLATTEN = ("flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1)"
               " -> Tensor(a)")
    SPLIT = "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"
    DETACH = "detach(Tensor(a) self) -> Tensor(a)"
    # copies and data movement
    CONTIGUOUS = "contiguous(Tensor(a) self) -> Tensor(a)"
    CLONE = "clone(Tensor self) -> Tensor"
    TO_COPY = "_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor"
    CAT = "cat(Tensor[] tensors, int dim=0) -> Tensor"
    STACK = "stack(Tensor[] tensors, int dim=0) -> Tensor"
    INDEX_SELECT = "index_select(Tensor self, int dim, Tensor index) -> Tensor"
    INDEX_ADD = ("index_add(Tensor self, int dim, Tensor index, Tensor source, *,"
                 " Scalar alpha=1) -> Tensor")
    EMBEDDING = "embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1) -> Tensor"
    # advanced indexing: `indices` (broadcast together) index dims dim, dim+1, ... of self
    INDEX = "index.Tensor(Tensor self, int dim, Tensor[] indices) -> Tensor"
    INDEX_PUT = ("index_put(Tensor self, int dim, Tensor[] indices, Tensor values,"
                 " bool accumulate=False) -> Tensor")
    GATHER = "gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"
    SCATTER = "scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"
    SCATTER_ADD = "scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"
    NONZERO = "nonzero(Tensor self) -> Tensor"
    SELECT_BACKWARD = ("select_backward(Tensor grad_output, SymInt[] input_sizes, int dim,"
                       " SymInt index) -> Tensor")
    SLICE_BACKWARD = ("slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim,"
                      " SymInt start, SymInt end, SymInt step) -> Tensor")
    # membership: each element of `elements` looked for among all of `test_elements`
    ISIN = ("isin.Tensor_Tensor(Tensor elements, Tensor test_elements, *,"
            " bool assume_unique=False, bool invert=False) -> Tensor")
    # sliding windows: every kernel window of images as a column (F.unfold), and back (F.fold)
    IM2COL = ("im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding,"
              " int[2] stride) -> Tensor")
    COL2IM = ("col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation,"
              " int[2] padding, int[2] stride) -> Tensor")
    # in place: write `self`, bump its version counter
    ADD_ = "add_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
    SUB_ = "sub_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
    MUL_ = "mul_" + _INPLACE_BINARY
    DIV_ = "div_" + _INPLACE_BINARY
    DIV_MODE_ = ("div_.Tensor_mode(Tensor(a!) self, Tensor other, *, str? rounding_mode)"
                 " -> Tensor(a!)")
    FLOOR_DIVIDE_ = "floor_divide_.Tensor" + _INPLACE_BINARY
    CLAMP_ = "clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)"
    CLAMP_TENSOR_ = "clamp_.Tensor(Tensor(a!) self, Tensor min, Tensor max) -> Tensor(a!)"
    NEG_ = "neg_" + _INPLACE_UNARY
    ABS_ = "abs_" + _INPLACE_UNARY
    SIGN_ = "sign_" + _INPLACE_UNARY
    EXP_ = "exp_" + _INPLACE_UNARY
    LOG_ = "log_" + _INPLACE_UNARY
    SQRT_ = "sqrt_" + _INPLACE_UNARY
    RSQRT_ = "rsqrt_" + _INPLACE_UNARY
    RELU_ = "relu_" + _INPLACE_UNARY
    TANH_ = "tanh_" + _INPLACE_UNARY
    SIGMOID_ = "sigmoid_" + _INPLACE_UNARY
    ERF_ = "erf_" + _INPLACE_UNARY
    EXPM1_ = "expm1_" + _INPLACE_UNARY
    LOG1P_ = "log1p_" + _INPLACE_UNARY
    NAN_TO_NUM_ = ("nan_to_num_(Tensor(a!) self, float? nan=None, float? posinf=None, "
                   "float? neginf=None) -> Tensor(a!)")
    POW_ = "pow_(Tensor(a!) self, Tensor exponent) -> Tensor(a!)"
    EQ_ = "eq_.Tensor" + _INPLACE_BINARY
    NE_ = "ne_.Tensor" + _INPLACE_BINARY
    LT_ = "lt_.Tensor" + _INPLACE_BINARY
    LE_ = "le_.Tensor" + _INPLACE_BINARY
    GT_ = "gt_.Tensor" + _INPLACE_BINARY
    GE_ = "ge_.Tensor" + _INPLACE_BINARY
    SIN_ = "sin_" + _INPLACE_UNARY
    COS_ = "cos_" + _INPLACE_UNARY
    TAN_ = "tan_" + _INPLACE_UNARY
    ASIN_ = "asin_" + _INPLACE_UNARY
    ACOS_ = "acos_" + _INPLACE_UNARY
    ATAN_ = "atan_" + _INPLACE_UNARY
    SINH_ = "sinh_" + _INPLACE_UNARY
    COSH_ = "cosh_" + _INPLACE_UNARY
    ASINH_ = "asinh_" + _INPLACE_UNARY
    ACOSH_ = "acosh_" + _INPLACE_UNARY
    ATANH_ = "atanh_" + _INPLACE_UNARY
    EXP2_ = "exp2_" + _INPLACE_UNARY
    SINC_ = "sinc_" + _INPLACE_UNARY
    DEG2RAD_ = "deg2rad_" + _INPLACE_UNARY
    RAD2DEG_ = "rad2deg_" + _INPLACE_UNARY
    FLOOR_ = "floor_" + _INPLACE_UNARY
    CEIL_ = "ceil_" + _INPLACE_UNARY
    TRUNC_ = "trunc_" + _INPLACE_UNARY
    FRAC_ = "frac_" + _INPLACE_UNARY
    SGN_ = "sgn_" + _INPLACE_UNARY
    ROUND_ = "round_.decimals(Tensor(a!) self, *, int decimals=0) -> Tensor(a!)"
    ATAN2_ = "atan2_" + _INPLACE_BINARY
    HYPOT_ = "hypot_" + _INPLACE_BINARY
    XLOGY_ = "xlogy_.Tensor" + _INPLACE_BINARY
    FMOD_ = "fmod_.Tensor" + _INPLACE_BINARY
    REMAINDER_ = "remainder_.Tensor" + _INPLACE_BINARY
    COPYSIGN_ = "copysign_.Tensor" + _INPLACE_BINARY
    NEXTAFTER_ = "nextafter_" + _INPLACE_BINARY
    HEAVISIDE_ = "heaviside_(Tensor(a!) self, Tensor values) -> Tensor(a!)"
    LOGIT_ = "logit_(Tensor(a!) self, float? eps=None) -> Tensor(a!)"
    ADDCMUL_ = ("addcmul_(Tensor(a!) self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)"
                " -> Tensor(a!)")
    ADDCDIV_ = ("addcdiv_(Tensor(a!) self, Tensor tensor1, Tensor tensor2, *, Scalar value=1)"
                " -> Tensor(a!)")
    ZERO_ = "zero_(Tensor(a!) self) -> Tensor(a!)"
    FILL_ = "fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)"
    COPY_ = "copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)"
    INDEX_PUT_ = ("index_put_(Tensor(a!) self, int dim, Tensor[] indices, Tensor values,"
                  " bool accumulate=False) -> Tensor(a!)")
    # compiler-only: they appear in graphs, never in eager dispatch
    SCALAR = "scalar(Scalar value) -> Tensor"
    FUSED = "fused(Tensor[] inputs, *, str kind, Graph body) -> Tensor[]"

    @cached_property
    def schema(self) -> FunctionSchema:
        return parse_schema(self.value)

    @property
    def aten(self) -> str:
        """The op's name as PyTorch shows it: `aten::mm`."""
        return "aten::" + self.schema.name

    @property
    def qualified_name(self) -> str:
        return self.schema.qualified_name

    def __repr__(self) -> str:
        return f"Op.{self.name}"


REDUCTION = frozenset({Op.SUM, Op.MEAN, Op.AMAX, Op.AMIN, Op.MAX_DIM, Op.MIN_DIM, Op.ARGMAX,
                       Op.ARGMIN, Op.VAR, Op.STD, Op.LINALG_VECTOR_NORM, Op.VAR_MEAN,
                       Op.STD_MEAN, Op.PROD})
NORMALIZATION = frozenset({Op.SOFTMAX, Op.LOG_SOFTMAX, Op.NATIVE_LAYER_NORM,
                           Op.NATIVE_GROUP_NORM})
MATMUL_FAMILY = frozenset({Op.DOT, Op.MV, Op.MM, Op.BMM, Op.ADDMM})
VIEW = frozenset(op for op in Op if op.schema.is_view)
INPLACE = frozenset(op for op in Op if op.schema.is_mutable)
TENSORS_ONLY = frozenset({Op.MAXIMUM, Op.MINIMUM, Op.LOGICAL_AND, Op.ATAN2, Op.HYPOT,
                          Op.LOGADDEXP, Op.LOGADDEXP2, Op.NEXTAFTER, Op.HEAVISIDE, Op.DOT,
                          Op.MV, Op.MM, Op.BMM, Op.MATMUL, Op.ATAN2_, Op.HYPOT_,
                          Op.NEXTAFTER_, Op.HEAVISIDE_, Op.ADDCMUL, Op.ADDCDIV,
                          Op.ADDCMUL_, Op.ADDCDIV_})
"""Ops that take no Python number for a Tensor argument: PyTorch has no Scalar form of
them (atan2(x, 2.0) is a TypeError), where other ops wrap the number."""
COMPILER_ONLY = frozenset({Op.SCALAR, Op.FUSED})
"""A wrapped Python number (it promotes as PyTorch promotes scalars), and a fused kernel
holding the small graph it computes."""
DATA_DEPENDENT_SHAPE = frozenset({Op.NONZERO})
"""Ops whose output shape depends on their input's values: capture cannot know it from
types, so it breaks the graph there."""
INDEXING = frozenset({Op.INDEX_SELECT, Op.INDEX_ADD, Op.EMBEDDING, Op.INDEX, Op.INDEX_PUT,
                      Op.GATHER, Op.SCATTER, Op.SCATTER_ADD, Op.INDEX_PUT_})
"""Ops that read an index tensor's values; they check every index against its dim's size
where they run (IndexError or RuntimeError as in PyTorch), so index tensors are ordinary
graph inputs."""
COMPOSITE = frozenset({Op.MATMUL, Op.LINEAR, Op.RESHAPE, Op.FLATTEN, Op.SPLIT, Op.CONTIGUOUS,
                       Op.STACK})
"""Ops with no kernel of their own: they decompose into others (CompositeImplicitAutograd)."""

_BY_NAME = {}
for _op in Op:
    _BY_NAME[_op.qualified_name] = _op
    _BY_NAME.setdefault(_op.schema.name, _op)


def lookup(name: str) -> Op:
    """Find an op by `mm`, `aten::mm` or `max.dim`."""
    key = name.removeprefix("aten::")
    if key not in _BY_NAME:
        raise KeyError(f"unknown op {name!r}")
    return _BY_NAME[key]
