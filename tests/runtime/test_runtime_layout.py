"""runtime/layout.py: the strides through which every row and elementwise kernel
addresses its operands. An operand is lined up with the iteration's dims as
broadcasting lines it up, and a shape that does not broadcast to them is refused
(CannotLower) rather than given strides that reach past its memory."""
import numpy as np
import pytest

from runtime.layout import CannotLower, broadcast_strides, rows_layout


def test_an_operand_lines_up_with_the_dims_that_are_not_reduced():
    """(G, D) against rows (N, G, D, HW) reduced over HW, read without the reduced dim:
    its dims are the rows' dims 1 and 2, the reduced dim stride 0."""
    w = np.zeros((2, 3))
    assert broadcast_strides(w, w.shape, (4, 2, 3, 5), {3}, True) == [0, 3, 1, 0]
    assert broadcast_strides(w, w.shape, (4, 2, 2, 3), {3}, False) == [0, 0, 3, 1]


@pytest.mark.parametrize("shape, full, reduced, squeezed", [
    ((3, 2, 3), (3, 2, 3, 5), {3}, False),  # a row's value lined up with all the dims
    ((2, 3), (4, 3, 2, 5), {3}, True),
    ((4, 2, 3, 5), (4, 2, 3), set(), False),  # more dims than the rows
    ((7,), (3, 5), {1}, True),
])
def test_a_layout_that_would_reach_outside_an_operand_cannot_lower(shape, full, reduced,
                                                                    squeezed):
    """The kernels address every operand through these strides: a shape that does not
    broadcast to the rows is refused, never given strides past its end."""
    a = np.zeros(shape)
    with pytest.raises(CannotLower):
        broadcast_strides(a, shape, full, reduced, squeezed)
    with pytest.raises(CannotLower):
        rows_layout([np.zeros(full), a], [full, shape], full, frozenset(reduced),
                    [False, squeezed])
