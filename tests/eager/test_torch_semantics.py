"""PyTorch semantics that public programs (pytorch/examples, torchvision, makemore, HF
transformers) rely on, each compared with PyTorch: copies where PyTorch copies, dtype
promotion of the bitwise operators, membership and isin, and the smaller Tensor
methods."""
import numpy as np
import pytest

import eager
from torch_parity import require_torch

RNG = np.random.default_rng(30)


def _pair(torch, array, requires_grad=False):
    return (eager.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


# repeat, tile, repeat_interleave: a new tensor, never a view ----------------------------
REPEATS = {
    "repeat-new-leading-dim": lambda x: x.repeat(2, 1, 1),
    "repeat-ones": lambda x: x.repeat(1, 1),
    "repeat-columns": lambda x: x.repeat(1, 3),
    "tile-ones": lambda x: x.tile((1,)),
    "repeat_interleave-once": lambda x: x.repeat_interleave(1, dim=0),
    "repeat_interleave-twice": lambda x: x.repeat_interleave(2, dim=1),
}


@pytest.mark.parametrize("name", REPEATS)
def test_repeat_copies_as_pytorch_does_so_an_in_place_op_on_it_works(name):
    torch = require_torch()
    fn = REPEATS[name]
    a = RNG.standard_normal((2, 3))
    (x, tx), (xg, txg) = _pair(torch, a), _pair(torch, a, requires_grad=True)
    y, ty = fn(x), fn(tx)
    assert y.stride() == ty.stride()
    y.mul_(2.0)  # fast_neural_style's normalize_batch divides its repeat in place
    np.testing.assert_array_equal(x.numpy(), a)  # the input is untouched
    np.testing.assert_allclose(y.numpy(), ty.mul_(2.0).numpy())
    w = RNG.standard_normal(tuple(ty.shape))
    fn(xg).mul_(1.0).backward(eager.tensor(w))
    fn(txg).mul_(1.0).backward(torch.tensor(w))
    np.testing.assert_allclose(xg.grad.numpy(), txg.grad.numpy())


def test_a_reshape_that_copies_is_no_view_so_it_can_be_written_in_place_with_gradients():
    torch = require_torch()
    a = RNG.standard_normal((2, 3))
    (x, tx) = _pair(torch, a, requires_grad=True)
    y, ty = x.t().reshape(6), tx.t().reshape(6)
    assert ty._base is None
    y.mul_(3.0).sum().backward()
    ty.mul_(3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
