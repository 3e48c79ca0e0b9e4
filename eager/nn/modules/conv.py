"""Convolution and pooling modules over nn.functional's (eager/nn/_convolution.py)."""
from __future__ import annotations

from eager import _missing, factories
from eager.nn import functional as F
from eager.nn import init
from eager.nn.modules.module import Module
from eager.nn.parameter import Parameter


def _tuple(value, n: int) -> tuple:
    return (value,) * n if isinstance(value, int) else tuple(value)


class _ConvNd(Module):
    _rank = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device=None, dtype=None, output_padding=0):
        super().__init__()
        n = self._rank
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', "
                             f"'circular'], but got padding_mode='{padding_mode}'")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _tuple(stride, n)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _tuple(kernel_size, n), _tuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.dilation, self.groups = _tuple(dilation, n), groups
        self.output_padding, self.padding_mode = _tuple(output_padding, n), padding_mode
        shape = ((in_channels, out_channels // groups) if self._transposed
                 else (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(factories.empty(*shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(factories.empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.layer_default_(self.weight, self.bias)

    def _padded(self, input):
        """(input, padding for the functional): padding_mode other than zeros pads here."""
        if self.padding_mode == "zeros" or isinstance(self.padding, str):
            return input, self.padding
        amounts = []
        for p in reversed(self.padding):
            amounts += [p, p]
        return F.pad(input, amounts, mode=self.padding_mode), 0

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._rank:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._rank:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._rank:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    _rank = 1

    def forward(self, input):
        x, padding = self._padded(input)
        return F.conv1d(x, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)


class Conv2d(_ConvNd):
    def forward(self, input):
        x, padding = self._padded(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, output_padding=0, groups: int = 1, bias: bool = True,
                 dilation=1, padding_mode: str = "zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for "
                             f"{type(self).__name__}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)


class ConvTranspose1d(_ConvTransposeNd):
    _rank = 1

    def forward(self, input):
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class ConvTranspose2d(_ConvTransposeNd):
    def forward(self, input):
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, **options):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride or kernel_size, padding
        for key, value in options.items():
            setattr(self, key, value)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool1d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__(kernel_size, stride, padding, dilation=dilation,
                         return_indices=return_indices, ceil_mode=ceil_mode)

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class MaxPool2d(MaxPool1d):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool1d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad)

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AvgPool2d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        super().__init__(kernel_size, stride, padding, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad,
                         divisor_override=divisor_override)

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _AdaptivePool(Module):
    _fn = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return type(self)._fn(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    _fn = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptivePool):
    _fn = staticmethod(F.adaptive_avg_pool2d)


class AdaptiveMaxPool2d(_AdaptivePool):
    _fn = staticmethod(F.adaptive_max_pool2d)


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation,
                      self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")


# torchvision's video models subclass Conv3d at import: a stand-in, making one raises
# NotSupportedYet naming it
Conv3d = _missing.lacking_class("torch.nn", "Conv3d", Module)
