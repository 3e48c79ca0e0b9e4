"""Normalisation, channel dropout, padding and Unflatten modules."""
from __future__ import annotations

from eager import factories
from eager.autograd.grad_mode import no_grad
from eager.nn import functional as F
from eager.nn.modules.layers import LayerNorm  # noqa: F401 - torch.nn.modules.normalization's
from eager.nn.modules.module import Module
from eager.nn.parameter import Parameter
from ir import dtypes


class _NormBase(Module):
    """BatchNorm's and InstanceNorm's parameters (weight 1, bias 0 when affine) and
    running statistics (buffers, when tracked)."""
    _ranks: tuple = ()  # the input ranks the module takes
    _name = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(factories.ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(factories.zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", factories.zeros(num_features, dtype=dtype,
                                                                 device=device))
            self.register_buffer("running_var", factories.ones(num_features, dtype=dtype,
                                                               device=device))
            self.register_buffer("num_batches_tracked",
                                 factories.tensor(0, dtype=dtypes.int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.copy_(factories.zeros_like(self.running_mean))
                self.running_var.copy_(factories.ones_like(self.running_var))
                self.num_batches_tracked.copy_(factories.zeros_like(self.num_batches_tracked))

    def _check_rank(self, input) -> None:
        if input.dim() not in self._ranks:
            wanted = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(f"expected {wanted} input (got {input.dim()}D input)")

    def _momentum(self) -> float:
        """The update factor of this step (counting it), None meaning a cumulative mean."""
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                return 1.0 / float(self.num_batches_tracked.item())
        return 0.0 if self.momentum is None else self.momentum

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_rank(input)
        momentum = self._momentum()
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(input, self.running_mean if not self.training or
                            self.track_running_stats else None,
                            self.running_var if not self.training or
                            self.track_running_stats else None,
                            self.weight, self.bias, use_batch, momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    _ranks = (5,)


class _InstanceNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def forward(self, input):
        self._check_rank(input)
        unbatched = input.dim() == self._ranks[0]
        if unbatched:
            input = input.unsqueeze(0)
        momentum = self._momentum()
        use_input_stats = self.training or not self.track_running_stats
        out = F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                              self.bias, use_input_stats, momentum, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    _ranks = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    _ranks = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _ranks = (4, 5)


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = \
            num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(factories.ones(num_channels, dtype=dtype, device=device))
            self.bias = Parameter(factories.zeros(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) \
            else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(factories.ones(*self.normalized_shape, dtype=dtype,
                                                   device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _ChannelDropout(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return type(self)._fn(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_ChannelDropout):
    _fn = staticmethod(F.dropout1d)


class Dropout2d(_ChannelDropout):
    _fn = staticmethod(F.dropout2d)


class Dropout3d(_ChannelDropout):
    _fn = staticmethod(F.dropout3d)


class _Pad(Module):
    _dims, _mode = 1, "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = (padding,) * (2 * self._dims) if isinstance(padding, int) \
            else tuple(padding)
        if len(self.padding) != 2 * self._dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or "
                             f"{2 * self._dims} ints, got {padding}")
        self.value = value

    def forward(self, input):
        value = self.value if self._mode == "constant" else None
        return F.pad(input, self.padding, self._mode, value)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


def _pad_class(name: str, dims: int, mode: str):
    """A padding module of `dims` dims; only ConstantPad takes a value."""
    attrs = {"_dims": dims, "_mode": mode, "__doc__": f"nn.{name}: F.pad, mode {mode!r}."}
    if not name.startswith("ConstantPad"):
        attrs["__init__"] = lambda self, padding: _Pad.__init__(self, padding)
    return type(name, (_Pad,), attrs)


ConstantPad1d, ConstantPad2d, ConstantPad3d = (_pad_class(f"ConstantPad{d}d", d, "constant")
                                               for d in (1, 2, 3))
ZeroPad1d, ZeroPad2d, ZeroPad3d = (_pad_class(f"ZeroPad{d}d", d, "constant") for d in (1, 2, 3))
ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = (
    _pad_class(f"ReflectionPad{d}d", d, "reflect") for d in (1, 2, 3))
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = (
    _pad_class(f"ReplicationPad{d}d", d, "replicate") for d in (1, 2, 3))
CircularPad1d, CircularPad2d, CircularPad3d = (
    _pad_class(f"CircularPad{d}d", d, "circular") for d in (1, 2, 3))


class Unflatten(Module):
    """Dim `dim` split into the dims `unflattened_size`."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        d = self.dim % input.dim()
        return input.reshape(tuple(input.shape[:d]) + self.unflattened_size +
                             tuple(input.shape[d + 1:]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
