"""nn.functional's activations, similarity and distance functions beyond the ops'
own (relu, gelu, silu, sigmoid, tanh, hardswish, softplus, ...), written in eager ops so autograd
and capture see those ops. `inplace=True` is accepted and computes out of place. Those
PyTorch computes in one kernel (elu, celu, selu, logsigmoid, mish, glu) take 16-bit floats
in float32 and round once (rounded_once), as that kernel does."""
from __future__ import annotations

from eager import factories
from eager.derived_math import norm
from eager.kernels._common import rounded_once
from eager.shapes import broadcast_shapes
from eager.tensor import Tensor, ops

__all__ = ["softplus_of", "leaky_relu", "elu", "celu", "selu", "softsign",
           "hardtanh", "relu6", "logsigmoid", "mish", "tanhshrink", "softshrink", "hardshrink",
           "threshold", "glu", "softmin", "prelu", "rrelu", "normalize", "cosine_similarity",
           "pairwise_distance"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return ops.where(input > 0, input, input * negative_slope)


@rounded_once
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x for x > 0, alpha expm1(x) below (of min(x, 0): no overflow above), as PyTorch
    computes it (elu(-0.0) is -0.0, of a subnormal the subnormal)."""
    return ops.where(input > 0, input, ops.expm1(ops.clamp(input, None, 0.0)) * alpha)


@rounded_once
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise ValueError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return ops.where(input > 0, input, ops.expm1(ops.clamp(input, None, 0.0) / alpha) * alpha)


@rounded_once
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def softplus_of(x: Tensor) -> Tensor:
    """log(1 + exp(x)): exp never overflows (each branch sees its own side of 0, so the
    branch not taken has a finite gradient), the gradient at 0 is sigmoid(0), and
    log1p keeps a small exp(x) exact (log(1 + e^-7) was 5e-5 off in float32)."""
    above = ops.clamp(x, 0.0, None)
    below = ops.clamp(x, None, 0.0)
    return ops.where(x > 0, above + ops.log1p(ops.exp(-above)), ops.log1p(ops.exp(below)))


def softsign(input: Tensor) -> Tensor:
    return input / (ops.abs(input) + 1)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    # clamp's values (x where it equals a bound: relu6(-0.0) is -0.0), and PyTorch's
    # gradient, which is 0 at the bounds where clamp's is 1
    inside = ops.logical_and(input > min_val, input < max_val)
    return ops.where(inside, input, ops.clamp(input.detach(), min_val, max_val))


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0)


def logsigmoid(input: Tensor) -> Tensor:
    """min(x, 0) - log1p(e^-|x|): one op (LogSigmoidBackward0), as PyTorch's."""
    return ops.log_sigmoid(input)


@rounded_once
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return input * ops.tanh(ops.softplus(input))


def tanhshrink(input: Tensor) -> Tensor:
    return input - ops.tanh(input)


@rounded_once  # (PyTorch's kernel reads lambd at float32 and rounds once)
def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return ops.where(input > lambd, input - lambd,
                     ops.where(input < -lambd, input + lambd, input * 0))  # -0.0, NaN stay


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return ops.where(ops.logical_and(input >= -lambd, input <= lambd), 0.0, input)  # NaN stays


@rounded_once  # (PyTorch's kernel reads both numbers at float32)
def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return ops.where(input <= threshold, float(value), input)  # NaN stays


def glu(input: Tensor, dim: int = -1) -> Tensor:
    return ops.glu(input, dim)


def softmin(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return ops.softmax(-input, softmax_dim(input, dim), dtype)


def softmax_dim(input: Tensor, dim):
    """softmax's dim; None: PyTorch's legacy choice, without its deprecation warning."""
    if dim is None:
        return 0 if input.dim() in (0, 1, 3) else 1
    return dim


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """max(0, x) + weight min(0, x), weight one number or one per channel (dim 1)."""
    if weight.numel() != 1:
        if input.dim() < 2 or weight.numel() != input.shape[1]:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {weight.numel()} and channel size = "
                               f"{input.shape[1] if input.dim() > 1 else 1}.")
        weight = weight.reshape([-1] + [1] * (input.dim() - 2))
    return ops.where(input > 0, input, input * weight)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
          training: bool = False, inplace: bool = False) -> Tensor:
    """Leaky ReLU with slopes drawn from U(lower, upper) in training, their mean in eval."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2)
    slopes = factories.rand_like(input) * (upper - lower) + lower
    return ops.where(input >= 0, input, input * slopes)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """input / max(||input||_p over dim, eps)."""
    return input / ops.clamp(norm(input, p, dim, True), eps, None)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """(x1 / max(||x1||, eps)) . (x2 / max(||x2||, eps)) along dim (broadcast), in
    PyTorch's order: each input divided by its norm first, so 16-bit inputs round where
    PyTorch's do (the norms, the quotients, their product; the sum once)."""
    shape = broadcast_shapes(x1.shape, x2.shape)
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = ops.clamp(norm(x1, 2, dim, True), eps, None)
    n2 = ops.clamp(norm(x2, 2, dim, True), eps, None)
    return ops.sum((x1 / n1) * (x2 / n2), [dim], False)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim."""
    return norm(x1 - x2 + eps, p, -1, keepdim)
