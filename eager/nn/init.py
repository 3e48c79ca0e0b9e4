"""Parameter initialisation as in torch.nn.init, drawing from kiln's seeded generator."""
from __future__ import annotations

import math
import warnings

import numpy as np

from eager import _missing
from eager import factories
from eager.autograd.grad_mode import no_grad
from eager.tensor import Tensor


def _fill_from(t: Tensor, values: np.ndarray) -> Tensor:
    with no_grad():
        t.copy_(factories.tensor(values, dtype=t.dtype))
    return t


_LINEAR_GAIN = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param=None) -> float:
    if nonlinearity in _LINEAR_GAIN:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    if t.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _fill_from(t, factories.numpy_generator(generator).uniform(a, b, tuple(t.shape)))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _fill_from(t, factories.numpy_generator(generator).normal(mean, std, tuple(t.shape)))


def zeros_(t: Tensor) -> Tensor:
    with no_grad():
        return t.zero_()


def ones_(t: Tensor) -> Tensor:
    with no_grad():
        return t.fill_(1.0)


def constant_(t: Tensor, val: float) -> Tensor:
    with no_grad():
        return t.fill_(val)


def _correct_fan(t: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t)
    return fan_in if mode == "fan_in" else fan_out


def _is_empty(t: Tensor) -> bool:
    """PyTorch leaves zero-element tensors alone (their fan can be 0), with a warning."""
    if 0 in t.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(t: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    if _is_empty(t):
        return t
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(_correct_fan(t, mode))
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    if _is_empty(t):
        return t
    std = calculate_gain(nonlinearity, a) / math.sqrt(_correct_fan(t, mode))
    return normal_(t, 0.0, std, generator)


def xavier_uniform_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def trunc_normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """N(mean, std) draws kept within [a, b] (values outside drawn again)."""
    if not a < b:
        raise ValueError(f"trunc_normal_: a ({a}) must be below b ({b})")
    numbers = factories.numpy_generator(generator)
    values = numbers.normal(mean, std, tuple(t.shape))
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = numbers.normal(mean, std, int(outside.sum()))
        outside = (values < a) | (values > b)
    return _fill_from(t, values)


def orthogonal_(t: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix over the first dim and the rest flattened: the Q of a
    Gaussian matrix's QR, its signs made unique as PyTorch makes them."""
    if t.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if t.numel() == 0:
        return t
    rows, cols = t.shape[0], t.numel() // t.shape[0]
    flat = factories.numpy_generator(generator).normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill_from(t, gain * q.reshape(tuple(t.shape)))


def eye_(t: Tensor) -> Tensor:
    if t.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill_from(t, np.eye(*t.shape))


def dirac_(t: Tensor, groups: int = 1) -> Tensor:
    """The identity convolution: each of the first min(out, in) channels (per group)
    passes its input channel through the kernel's centre."""
    if t.dim() not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per_group = t.shape[0] // groups
    values = np.zeros(tuple(t.shape))
    centre = tuple(k // 2 for k in t.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, t.shape[1])):
            values[(g * out_per_group + d, d) + centre] = 1.0
    return _fill_from(t, values)


def sparse_(t: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """N(0, std) with ceil(sparsity * rows) entries of each column zeroed."""
    if t.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    numbers = factories.numpy_generator(generator)
    rows, cols = t.shape
    values = numbers.normal(0.0, std, (rows, cols))
    zeros = int(math.ceil(sparsity * rows))
    for c in range(cols):
        values[numbers.permutation(rows)[:zeros], c] = 0.0
    return _fill_from(t, values)


def layer_default_(weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's default for Linear and convolutions: kaiming_uniform_(a=sqrt(5)) for
    the weight, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = _calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)


def _deprecated(method):
    """PyTorch's old names without the underscore: a warning, then the method."""
    def old(*args, **kwargs):
        warnings.warn(f"nn.init.{method.__name__[:-1]} is now deprecated in favor of "
                      f"nn.init.{method.__name__}.", FutureWarning, stacklevel=2)
        return method(*args, **kwargs)
    old.__name__ = method.__name__[:-1]
    return old


uniform, normal, constant, xavier_uniform, xavier_normal, kaiming_uniform, kaiming_normal, \
    orthogonal, sparse, dirac, eye = map(_deprecated, (
        uniform_, normal_, constant_, xavier_uniform_, xavier_normal_, kaiming_uniform_,
        kaiming_normal_, orthogonal_, sparse_, dirac_, eye_))

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn.init", "eager.nn.init")
