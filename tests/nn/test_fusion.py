"""nn.utils.fusion: a batch norm folded into the convolution or linear layer before it
computes what the eval-mode pair computes, and the same weights as PyTorch's fusion."""
import numpy as np
import pytest

import eager
from eager.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _pair(m, kind: str):
    m.manual_seed(0)
    rng = np.random.default_rng(1)
    if kind == "conv":
        layer, bn = m.nn.Conv2d(3, 4, 3, bias=False), m.nn.BatchNorm2d(4)
    elif kind == "transposed":
        layer, bn = m.nn.ConvTranspose2d(3, 4, 3), m.nn.BatchNorm2d(4)
    else:
        layer, bn = m.nn.Linear(3, 4), m.nn.BatchNorm1d(4)
    for t in list(layer.parameters()) + [bn.weight, bn.bias, bn.running_mean]:
        t.data = m.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32))
    bn.running_var.data = m.tensor(rng.uniform(0.5, 2, 4).astype(np.float32))
    return layer.eval(), bn.eval()


@pytest.mark.parametrize("kind", ["conv", "transposed", "linear"])
def test_the_fused_layer_computes_the_pair_and_has_pytorchs_weights(kind):
    x = np.random.default_rng(2).standard_normal((2, 3, 5, 5) if kind != "linear" else (2, 3))
    x = x.astype(np.float32)
    fuse_ours = fuse_linear_bn_eval if kind == "linear" else \
        (lambda a, b: fuse_conv_bn_eval(a, b, transpose=kind == "transposed"))
    fuse_theirs = torch.nn.utils.fusion.fuse_linear_bn_eval if kind == "linear" else \
        (lambda a, b: torch.nn.utils.fusion.fuse_conv_bn_eval(a, b, kind == "transposed"))
    layer, bn = _pair(eager, kind)
    fused = fuse_ours(layer, bn)
    np.testing.assert_allclose(fused(eager.tensor(x)).detach().numpy(),
                               bn(layer(eager.tensor(x))).detach().numpy(), atol=1e-5)
    theirs = fuse_theirs(*_pair(torch, kind))
    for name in ("weight", "bias"):
        np.testing.assert_allclose(getattr(fused, name).detach().numpy(),
                                   getattr(theirs, name).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(fused.weight, eager.nn.Parameter) and layer.bias is not fused.bias
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        fuse_ours(layer.train(), bn)
