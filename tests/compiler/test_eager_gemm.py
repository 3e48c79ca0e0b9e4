"""eager.mm and eager.bmm on kiln's GEMM, chosen through the public registration API."""
import numpy as np
import pytest

import eager
from compiler.gemm import eager as eager_gemm


@pytest.fixture
def kiln_gemm():
    eager_gemm.use_kiln_gemm()
    yield
    eager_gemm.use_kiln_gemm(False)


def test_mm_and_bmm_switch_paths_with_the_same_results(kiln_gemm):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 61)), rng.standard_normal((61, 19))
    for dtype in (eager.float32, eager.float64):
        x, y = eager.tensor(a, dtype=dtype), eager.tensor(b, dtype=dtype)
        tol = 1e-4 if dtype is eager.float32 else 1e-12
        np.testing.assert_allclose(eager.mm(x, y).numpy(), a @ b, rtol=tol, atol=tol)
        batched = eager.matmul(x.expand(2, 37, 61), y.expand(2, 61, 19))  # bmm
        np.testing.assert_allclose(batched.numpy(), np.broadcast_to(a @ b, (2, 37, 19)),
                                   rtol=tol, atol=tol)
    assert "compiler/gemm/eager.py" in eager._C._dispatch_dump_table("aten::mm")
    ints = eager.tensor([[1, 2]]) @ eager.tensor([[3], [4]])
    assert ints.tolist() == [[11]]  # other dtypes keep numpy's kernel


def test_eager_products_run_on_the_shape_generic_kernels(kiln_gemm):
    """However often a size repeats, eager compiles no kernel for it (gemm_small)."""
    from compiler.gemm import small as gemm_small
    before = set(gemm_small._kernels)
    x, y = eager.randn(9, 14), eager.randn(14, 6)
    for _ in range(3):
        np.testing.assert_allclose(eager.mm(x, y).numpy(), x.numpy() @ y.numpy(), rtol=1e-5,
                                   atol=1e-5)
    assert set(gemm_small._kernels) == before


def test_errors_and_gradients_are_unchanged(kiln_gemm):
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(2x3 and 4x2\)"):
        eager.mm(eager.ones(2, 3), eager.ones(4, 2))
    w = eager.randn(3, 2, requires_grad=True)
    (eager.ones(4, 3) @ w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 4.0))


def test_switching_back_restores_numpy():
    eager_gemm.use_kiln_gemm()
    eager_gemm.use_kiln_gemm(False)
    assert not eager_gemm.using_kiln_gemm()
    assert "eager/kernels/linalg.py" in eager._C._dispatch_dump_table("aten::mm")
