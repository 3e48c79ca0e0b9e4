"""eager.mm and eager.bmm on kiln's GEMM, chosen through the public registration API."""
import numpy as np
import pytest

import eager
from eager.backends.native import gemm as eager_gemm


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
    assert "eager/backends/native/gemm.py" in eager._C._dispatch_dump_table("aten::mm")
    ints = eager.tensor([[1, 2]]) @ eager.tensor([[3], [4]])
    assert ints.tolist() == [[11]]  # other dtypes keep numpy's kernel


def test_eager_products_run_on_the_shape_generic_kernels(kiln_gemm):
    """However often a size repeats, eager compiles no kernel for it (gemm_small)."""
    from runtime.cpu.gemm import small as gemm_small
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


# by default: products of GEMM_MACS or more on kiln's GEMM, smaller ones on numpy's BLAS
@pytest.fixture
def products(monkeypatch):
    """The (a shape, b shape, batched) of every product handed to kiln's GEMM."""
    from eager.kernels import linalg
    assert linalg.native_gemm() is eager_gemm
    seen = []
    original = eager_gemm.product

    def product(a, b, batched, rounded=False):
        seen.append((a.shape, b.shape, batched))
        return original(a, b, batched, rounded)
    monkeypatch.setattr(eager_gemm, "product", product)
    return seen


def _reference(a, b):
    return a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)


@pytest.mark.parametrize("dtype, tol", [(eager.float32, 1e-4), (eager.float64, 1e-12)])
def test_large_products_run_on_kiln_gemm_and_small_ones_on_numpy(products, dtype, tol):
    rng = np.random.default_rng(1)
    big = [(97, 131, 83), (16, 2048, 16)]  # odd sizes; a long, thin one at the edge
    small = [(2, 3, 2), (15, 4096, 64), (64, 64, 64), (128, 784, 10)]
    for m, k, n in big + small:
        a = eager.tensor(rng.standard_normal((m, k)), dtype=dtype)
        b = eager.tensor(rng.standard_normal((k, n)), dtype=dtype)
        np.testing.assert_allclose(eager.mm(a, b).numpy(), _reference(a, b), rtol=tol,
                                   atol=tol)
    assert [shapes[:2] for shapes in products] == [((m, k), (k, n)) for m, k, n in big]


def test_transposed_broadcast_and_batched_operands_give_the_definition(products):
    rng = np.random.default_rng(2)
    a = eager.tensor(rng.standard_normal((120, 90)).astype(np.float32))
    b = eager.tensor(rng.standard_normal((70, 90)).astype(np.float32))
    np.testing.assert_allclose((a @ b.t()).numpy(), _reference(a, b.t()), rtol=1e-4,
                               atol=1e-4)
    w = eager.tensor(rng.standard_normal((33, 150)).astype(np.float32))
    cols = eager.tensor(rng.standard_normal((5, 150, 67)).astype(np.float32))
    np.testing.assert_allclose((w @ cols).numpy(), w.numpy().astype(np.float64) @ cols.numpy(),
                               rtol=1e-4, atol=1e-4)  # a weight broadcast over a batch (conv)
    strided = eager.tensor(rng.standard_normal((4, 90, 2 * 120)).astype(np.float32))[:, :, ::2]
    got = eager.bmm(strided.transpose(1, 2), strided)
    np.testing.assert_allclose(got.numpy(), np.swapaxes(strided.numpy(), 1, 2).astype(
        np.float64) @ strided.numpy(), rtol=1e-4, atol=1e-4)
    assert [batched for *_, batched in products] == [False, True, True]


def test_linear_with_bias_runs_its_product_on_kiln_gemm(products):
    rng = np.random.default_rng(3)
    x = eager.tensor(rng.standard_normal((64, 200)).astype(np.float32))
    w = eager.tensor(rng.standard_normal((50, 200)).astype(np.float32))
    b = eager.tensor(rng.standard_normal(50).astype(np.float32))
    got = eager.nn.functional.linear(x, w, b)
    np.testing.assert_allclose(got.numpy(), _reference(x, w.t()) + b.numpy(), rtol=1e-4,
                               atol=1e-4)
    assert len(products) == 1


def test_empty_products_keep_numpy_and_give_zeros(products):
    got = eager.mm(eager.ones(64, 0), eager.ones(0, 64))
    assert tuple(got.shape) == (64, 64) and not got.numpy().any()
    assert tuple(eager.bmm(eager.ones(0, 64, 512), eager.ones(0, 512, 64)).shape) == (0, 64, 64)
    assert products == []


def test_a_kernel_compiling_in_the_background_leaves_the_product_to_numpy(monkeypatch):
    calls = []

    def pending(a, b, batched, rounded=False):
        calls.append(batched)
        return None  # what product() gives while KernelPending
    monkeypatch.setattr(eager_gemm, "product", pending)
    a, b = eager.randn(100, 100, dtype=eager.float64), eager.randn(100, 100, dtype=eager.float64)
    np.testing.assert_array_equal(eager.mm(a, b).numpy(), a.numpy() @ b.numpy())
    assert calls == [False]


def test_kiln_eager_native_0_keeps_numpy_for_every_product(tmp_path):
    import os
    import subprocess
    import sys
    code = ("import eager, sys\n"
            "a = eager.randn(200, 200)\n"
            "a @ a\n"
            "from eager.kernels import linalg\n"
            "sys.exit(0 if linalg._gemm is False and 'runtime.cpu.gemm' not in sys.modules "
            "else 1)\n")
    env = {**os.environ, "KILN_EAGER_NATIVE": "0"}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_small_products_do_not_load_the_compiler():
    import subprocess
    import sys
    code = ("import eager, sys\n"
            "a = eager.randn(2, 3, requires_grad=True)\n"
            "(a @ eager.randn(3, 2)).sum().backward()\n"
            "eager.bmm(eager.randn(4, 8, 64), eager.randn(4, 64, 8))\n"
            "sys.exit(0 if 'compiler' not in sys.modules and 'llvmlite' not in sys.modules "
            "else 1)\n")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("dtype", [eager.bfloat16, eager.float16])
def test_half_products_hand_their_16_bit_operands_to_kiln_gemm(products, dtype, monkeypatch,
                                                              widened_bfloat16):
    """mm, bmm and addmm (linear) of bfloat16 or float16 give kiln's GEMM the 16-bit
    arrays (widened while packed: no conversion pass in numpy); mm and bmm have its
    store round the product, addmm rounds the float32 product plus the bias: bitwise the
    float32 products rounded. (Where the GEMM multiplies bfloat16 with vdpbf16ps, the
    sums differ in their last float32 bits: tests/runtime/cpu/test_gemm_bf16_dot.py.)"""
    seen = []
    original = eager_gemm.product
    monkeypatch.setattr(eager_gemm, "product", lambda a, b, batched, rounded=False: (
        seen.append((a.dtype.name, b.dtype.name, rounded)),
        original(a, b, batched, rounded))[1])
    rng = np.random.default_rng(4)
    a = eager.tensor(rng.standard_normal((97, 131)), dtype=dtype)
    b = eager.tensor(rng.standard_normal((131, 83)), dtype=dtype)
    bias = eager.tensor(rng.standard_normal(83), dtype=dtype)
    batch = eager.tensor(rng.standard_normal((3, 40, 131)), dtype=dtype)

    def same(got, expected):
        assert got.dtype is dtype
        assert np.array_equal(got.numpy().view(np.uint16), expected.numpy().view(np.uint16))

    same(eager.mm(a, b), eager.mm(a.float(), b.float()).to(dtype))
    same(eager.mm(a, b.t().contiguous().t()), eager.mm(a.float(), b.float()).to(dtype))
    same(eager.bmm(batch, b.expand(3, 131, 83)),
         eager.bmm(batch.float(), b.float().expand(3, 131, 83)).to(dtype))
    same(eager.addmm(bias, a, b), eager.addmm(bias.float(), a.float(), b.float()).to(dtype))
    halves = [names for names in seen if names[0] != "float32"]  # not the references
    name = dtype.np.name
    assert halves == [(name, name, True)] * 3 + [(name, name, False)]
