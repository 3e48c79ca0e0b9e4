"""copy.deepcopy of tensors, as PyTorch: leaves only, new memory, class and requires_grad kept."""
import copy

import numpy as np
import pytest

import eager
from eager import nn


def test_a_deep_copied_leaf_has_its_own_memory_and_gradient():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    y = copy.deepcopy(x)
    assert y.requires_grad and y.is_leaf and type(y) is eager.Tensor
    np.testing.assert_array_equal(y.grad.numpy(), [3.0, 3.0])
    with eager.no_grad():
        y.add_(1.0)
        y.grad.add_(1.0)
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_a_parameter_stays_a_parameter_and_shared_ones_stay_shared():
    p = nn.Parameter(eager.ones(2))
    a, b = copy.deepcopy([p, p])
    assert type(a) is nn.Parameter and a.requires_grad and a is b and a is not p


def test_a_non_leaf_cannot_be_deep_copied():
    x = eager.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x)
