"""torch.nn.utils.fusion: fold an eval-mode batch norm into the convolution or linear layer
before it (inference only: the folded layer computes what the pair computed with the
norm's running statistics), as PyTorch's does."""
from __future__ import annotations

import copy

from eager import factories
from eager.functional import rsqrt
from eager.nn.parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)
    return fused


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b,
                         transpose: bool = False):
    """(weight, bias) Parameters: w * g / sqrt(v + eps) per output channel (the second
    dim for a transposed convolution), (b - m) * g / sqrt(v + eps) + beta."""
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    conv_b = factories.zeros_like(bn_rm) if conv_b is None else conv_b
    bn_w = factories.ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = factories.zeros_like(bn_rm) if bn_b is None else bn_b
    var_rsqrt = rsqrt(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    fused_w = (conv_w * (bn_w * var_rsqrt).reshape(shape)).to(dtype=weight_dtype)
    fused_b = ((conv_b - bn_rm) * var_rsqrt * bn_w + bn_b).to(dtype=bias_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, conv_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError("To fuse, linear.out_features == bn.num_features or "
                             "bn.num_features == 1")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    linear_b = factories.zeros_like(bn_rm) if linear_b is None else linear_b
    scale = bn_w * rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * scale.unsqueeze(-1)
    fused_b = (linear_b - bn_rm) * scale + bn_b
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)
