"""Each pass on IR text, before and after; fusion's edge cases; the verifier after every
pass; memory planning and traffic counts."""
import textwrap

import numpy as np
import pytest

import eager
import ir
from compiler import interpreter
from compiler.passes import (constant_fold, cse, dce, decompose, drop_copies, fuse,
                             optimize, plan_memory, simplify, traffic)
from compiler.passes.rewrite import verify_types


def G(text: str) -> ir.Graph:
    return ir.parse(textwrap.dedent(text))


def same(graph: ir.Graph, text: str) -> None:
    assert str(graph) == textwrap.dedent(text).lstrip("\n")
    verify_types(graph)


def run(graph, *arrays):
    return [t.numpy() for t in interpreter.run(graph, [eager.tensor(a) for a in arrays])]


def test_dce_drops_what_no_output_reads():
    same(dce(G("""
        graph(%x: f32[3]):
          %0: f32[3] = exp(%x)
          %1: f32[3] = neg(%x)
          %2: f32[3] = tanh(%0)
          return (%2)
        """)), """
        graph(%x: f32[3]):
          %0: f32[3] = exp(%x)
          %1: f32[3] = tanh(%0)
          return (%1)
        """)


def test_cse_reuses_repeated_nodes():
    same(cse(G("""
        graph(%x: f32[3]):
          %0: f32[3] = exp(%x)
          %1: f32[3] = exp(%x)
          %2: f32[3] = add(%0, %1, alpha=1)
          return (%2)
        """)), """
        graph(%x: f32[3]):
          %0: f32[3] = exp(%x)
          %1: f32[3] = add(%0, %0, alpha=1)
          return (%1)
        """)


def test_cse_keeps_equal_constants_of_different_types_apart():
    graph = cse(G("""
        graph(%x: i64[3], %m: b8[3], %f: f32[3]):
          %0: i64[] = scalar(value=0)
          %1: f32[] = scalar(value=0.0)
          %2: i64[3] = where(%m, %x, %0)
          %3: f32[3] = add(%f, %1, alpha=1)
          return (%2, %3)
        """))
    assert [n.outputs[0].type.dtype.name for n in graph.nodes[:2]] == ["int64", "float32"]
    x, m, f = eager.tensor([1, 2, 3]), eager.tensor([True, False, True]), eager.ones(3)
    kept, added = interpreter.prepare(graph)([x, m, f])
    assert kept.dtype == eager.int64 and kept.tolist() == [1, 0, 3]


def test_cse_keeps_a_negative_zero_apart_from_zero():
    graph = cse(G("""
        graph(%m: b8[3], %f: f32[3]):
          %0: f64[] = scalar(value=0.0)
          %1: f64[] = scalar(value=-0.0)
          %2: f32[3] = where(%m, %0, %f)
          %3: f32[3] = where(%m, %1, %f)
          return (%2, %3)
        """))
    m, f = eager.tensor([True, False, True]), eager.ones(3)
    zero, negative = interpreter.prepare(graph)([m, f])
    assert np.signbit(negative.numpy()).tolist() == [True, False, True]
    assert not np.signbit(zero.numpy()).any()


def test_constant_folding_uses_eager_arithmetic():
    same(dce(constant_fold(G("""
        graph(%x: f32[3]):
          %0: i64[] = scalar(value=2)
          %1: f32[] = scalar(value=0.25)
          %2: f32[] = mul(%0, %1)
          %3: f32[3] = mul(%x, %2)
          return (%3)
        """))), """
        graph(%x: f32[3]):
          %0: f32[] = scalar(value=0.5)
          %1: f32[3] = mul(%x, %0)
          return (%1)
        """)


@pytest.mark.parametrize("before, after", [
    ("%0: f32[] = scalar(value=1)\n  %1: f32[2,3] = mul(%x, %0)", None),
    ("%0: i64[] = scalar(value=1)\n  %1: f32[2,3] = mul(%0, %x)", None),
    ("%0: f32[2,3] = neg(%x)\n  %1: f32[2,3] = neg(%0)", None),
    ("%0: f32[3,2] = t(%x)\n  %1: f32[2,3] = t(%0)", None),
    ("%0: f32[3,2] = transpose.int(%x, dim0=0, dim1=1)\n"
     "  %1: f32[2,3] = transpose.int(%0, dim0=-1, dim1=0)", None),
    ("%0: f32[3,2] = permute(%x, dims=[1, 0])\n  %1: f32[2,3] = permute(%0, dims=[1, 0])", None),
    ("%0: f32[2,3] = view(%x, size=[2, 3])\n  %1: f32[2,3] = exp(%0)", "exp"),
    ("%0: f32[2,3] = _to_copy(%x, dtype=f32, device=None)\n  %1: f32[2,3] = exp(%0)", "exp"),
])
def test_simplify_removes_identities(before, after):
    text = f"graph(%x: f32[2,3]):\n  {before}\n  return (%1)\n"
    g = dce(simplify(G(text)))
    if after is None:
        assert g.nodes == () and g.outputs == g.inputs
    else:
        assert [n.op.schema.name for n in g.nodes] == [after]


@pytest.mark.parametrize("text", [
    # x + 0 keeps -0.0 + 0 = +0.0 for floats; bool * 1 promotes to int64
    "graph(%x: f32[3]):\n  %0: i64[] = scalar(value=0)\n  %1: f32[3] = add(%x, %0, alpha=1)\n"
    "  return (%1)\n",
    "graph(%x: b8[3]):\n  %0: i64[] = scalar(value=1)\n  %1: i64[3] = mul(%x, %0)\n"
    "  return (%1)\n",
    "graph(%x: f32[3]):\n  %0: f32[] = scalar(value=3.0)\n  %1: f32[3] = div(%x, %0)\n"
    "  return (%1)\n",
    "graph(%x: i32[3]):\n  %0: f32[] = scalar(value=1.0)\n  %1: f32[3] = mul(%x, %0)\n"
    "  return (%1)\n",
])
def test_simplify_leaves_what_would_change_results(text):
    assert str(dce(simplify(G(text)))) == text


def test_division_by_a_power_of_two_becomes_an_exact_multiply():
    g = dce(simplify(G("graph(%x: f32[3]):\n  %0: f32[] = scalar(value=4.0)\n"
                       "  %1: f32[3] = div(%x, %0)\n  return (%1)\n")))
    assert [n.op.schema.name for n in g.nodes] == ["scalar", "mul"]
    assert g.nodes[0].attr["value"] == 0.25
    x = np.array([1.0, 3.0, -7.0], np.float32)
    np.testing.assert_array_equal(run(g, x)[0], x / np.float32(4))


def test_a_square_by_pow_becomes_a_multiply_giving_the_same_bits():
    """pow(x, 2), a variance's ((x - m) ** 2), is x * x as PyTorch computes it: the
    general pow (exp of a log) cost a row kernel ten times its memory traffic."""
    g = dce(simplify(G("graph(%x: f32[5]):\n  %0: i64[] = scalar(value=2)\n"
                       "  %1: f32[5] = pow(%x, %0)\n  return (%1)\n")))
    assert [n.op.schema.name for n in g.nodes] == ["mul"]
    x = np.array([1.5, -3.0, 1e-30, 3e19, 0.1], np.float32)
    np.testing.assert_array_equal(run(g, x)[0], x * x)
    np.testing.assert_array_equal(run(g, x)[0], (x.astype(np.float64) ** 2).astype(np.float32))


def test_view_chain_on_fresh_memory_becomes_one_view():
    g = dce(simplify(G("""
        graph(%x: f32[2,6]):
          %0: f32[2,6] = exp(%x)
          %1: f32[3,4] = view(%0, size=[3, 4])
          %2: f32[12] = view(%1, size=[12])
          return (%2)
        """)))
    assert [str(n).split(" = ")[1] for n in g.nodes] == ["exp(%x)", "view(%0, size=[12])"]


def test_a_view_dropping_the_kept_dims_of_a_reduction_becomes_the_reduction_without_them():
    """A bias's gradient (the sum over the batch, viewed as the bias) and a row maximum:
    the kernel then writes the view's shape. A view to another shape stays."""
    same(dce(simplify(G("""
        graph(%g: f32[8,5], %x: f32[2,3,4]):
          %0: f32[1,5] = sum(%g, dim=[0], keepdim=True, dtype=None)
          %1: f32[5] = view(%0, size=[5])
          %2: f32[2,3,1] = amax(%x, dim=[-1], keepdim=True)
          %3: f32[2,3] = view(%2, size=[2, 3])
          %4: f32[3,2] = view(%2, size=[3, 2])
          return (%1, %3, %4)
        """))), """
        graph(%g: f32[8,5], %x: f32[2,3,4]):
          %0: f32[5] = sum(%g, dim=[0], keepdim=False, dtype=None)
          %1: f32[2,3,1] = amax(%x, dim=[-1], keepdim=True)
          %2: f32[2,3] = amax(%x, dim=[-1], keepdim=False)
          %3: f32[3,2] = view(%1, size=[3, 2])
          return (%0, %2, %3)
    """)


ROW_EXPAND = """
    graph(%x: f32[4,6], %y: f32[4,6]):
      %0: f32[4,1] = sum(%x, dim=[1], keepdim=True, dtype=None)
      %1: f32[4,6] = expand(%0, size=[4, 6], implicit=False)
      %2: f32[4,6] = mul(%1, %y)
      %3: f32[] = scalar(value=2.0)
      %4: f32[4,6] = mul(%1, %3)
      return (%2, %4)
    """


def test_an_elementwise_op_reads_a_row_value_instead_of_its_expand():
    """mul(expand(s), y) broadcasts s itself (y has the shape); mul(expand(s), 2.0) keeps
    the expand, which alone gives the result its shape."""
    g = dce(simplify(G(ROW_EXPAND)))
    assert [str(n).split(" = ")[1] for n in g.nodes] == [
        "sum(%x, dim=[1], keepdim=True, dtype=None)", "expand(%0, size=[4, 6], implicit=False)",
        "mul(%0, %y)", "scalar(value=2.0)", "mul(%1, %3)"]
    verify_types(g)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)]
    for got, want in zip(run(g, *arrays), run(G(ROW_EXPAND), *arrays)):
        np.testing.assert_array_equal(got, want)


def test_a_zero_dim_value_keeps_its_expand_which_changes_promotion():
    text = ("graph(%x: f64[], %y: f32[3]):\n"
            "  %0: f64[3] = expand(%x, size=[3], implicit=False)\n"
            "  %1: f64[3] = mul(%0, %y)\n  return (%1)\n")
    assert str(dce(simplify(G(text)))) == text


THROUGH_VIEW = """
    graph(%a: f32[2,6], %b: f32[6,4], %x: f32[3,4]):
      %0: f32[2,4] = mm(%a, %b)
      %1: f32[2,2,2] = view(%0, size=[2, 2, 2])
      %2: f32[2,2,2] = relu(%1)
      %3: f32[] = scalar(value=0.5)
      %4: f32[2,2,2] = mul(%1, %3)
      %5: f32[12] = view(%x, size=[12])
      %6: f32[12] = tanh(%5)
      return (%2, %4, %6)
    """


def test_a_one_tensor_elementwise_op_moves_before_a_view_of_a_fresh_value():
    """relu(view(mm)) -> view(relu(mm)), numbers aside too; an input's view stays (an input
    need not be contiguous)."""
    g = dce(simplify(G(THROUGH_VIEW)))
    assert [str(n).split(" = ")[1] for n in g.nodes] == [
        "mm(%a, %b)", "relu(%0)", "view(%1, size=[2, 2, 2])", "scalar(value=0.5)",
        "mul(%0, %3)", "view(%4, size=[2, 2, 2])", "view(%x, size=[12])", "tanh(%6)"]
    verify_types(g)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 6), (6, 4), (3, 4))]
    for got, want in zip(run(g, *arrays), run(G(THROUGH_VIEW), *arrays)):
        np.testing.assert_array_equal(got, want)


def test_a_convolution_with_bias_and_relu_is_one_gemm_kernel():
    import eager.nn.functional as F
    from compiler import lower
    x, w, b = eager.randn(2, 3, 17, 16), eager.randn(5, 3, 3, 2), eager.randn(5)
    lowered = lower(lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)), x, w, b)
    fused = [n for n in lowered.optimized[0].nodes if n.op is ir.Op.FUSED]
    assert [dict(n.attrs)["kind"] for n in fused] == ["gemm"]
    assert [m.op for m in dict(fused[0].attrs)["body"].nodes][-2:] == [ir.Op.ADD, ir.Op.RELU]


def test_a_convolution_over_few_positions_is_one_product_over_the_whole_batch(monkeypatch):
    """ResNet's later stages (1..64 positions an image): one (O, C K) @ (C K, N L)
    product with its bias, not N matrix-vector-thin ones (a tenth of the GEMM's speed)."""
    import eager.nn.functional as F
    from compiler import lower
    from eager.nn import _convolution
    from eager.nn._convolution import FOLD_BELOW
    x, w, b = eager.randn(8, 16, 4, 4), eager.randn(32, 16, 3, 3), eager.randn(32)
    assert 4 * 4 < FOLD_BELOW
    lowered = lower(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b)
    gemms = [n for n in lowered.optimized[0].nodes
             if n.op is ir.Op.FUSED and dict(n.attrs)["kind"] == "gemm"]
    (product,) = [m for g in gemms for m in dict(g.attrs)["body"].nodes
                  if m.op in (ir.Op.MM, ir.Op.BMM)]
    assert product.op is ir.Op.MM and list(product.outputs[0].type.shape) == [32, 8 * 16]
    folded = F.conv2d(x, w, b, padding=1)
    monkeypatch.setattr(_convolution, "FOLD_BELOW", 0)  # image by image
    np.testing.assert_allclose(folded.numpy(), F.conv2d(x, w, b, padding=1).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_slice_gradients_over_adjacent_ranges_become_one_cat():
    """q, k, v = qkv.split(...): their gradients are written once, not padded and added;
    the sum's order does not matter, and ranges that do not meet are left alone."""
    text = """
        graph(%a: f32[2,3], %b: f32[2,4], %c: f32[2,2]):
          %0: f32[2,9] = slice_backward(%b, input_sizes=[2, 9], dim=1, start=3, end=7, step=1)
          %1: f32[2,9] = slice_backward(%a, input_sizes=[2, 9], dim=-1, start=0, end=3, step=1)
          %2: f32[2,9] = add(%0, %1, alpha=1)
          %3: f32[2,9] = slice_backward(%c, input_sizes=[2, 9], dim=1, start=7, end=9, step=1)
          %4: f32[2,9] = add(%2, %3, alpha=1)
          %5: f32[2,9] = slice_backward(%c, input_sizes=[2, 9], dim=1, start=-2, end=100, step=1)
          %6: f32[2,9] = add(%1, %5, alpha=1)
          return (%4, %6)
        """
    g = dce(simplify(G(text)))
    verify_types(g)
    assert [str(n).split(" = ")[1].split("(")[0] for n in g.nodes] == [
        "slice_backward", "cat", "slice_backward", "add"]
    assert str(g.nodes[1]).endswith("cat([%a, %b, %c], dim=1)")
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4), (2, 2))]
    for got, want in zip(run(g, *arrays), run(G(text), *arrays)):
        np.testing.assert_array_equal(got, want)


def test_drop_copies_keeps_clones_that_leave_the_graph():
    same(drop_copies(G("""
        graph(%x: f32[3]):
          %0: f32[3] = clone(%x)
          %1: f32[3] = exp(%0)
          %2: f32[3] = clone(%1)
          return (%2)
        """)), """
        graph(%x: f32[3]):
          %0: f32[3] = exp(%x)
          %1: f32[3] = clone(%0)
          return (%1)
        """)


def test_decompose_softmax_into_the_core():
    g = decompose(G("graph(%x: f32[4,5]):\n  %0: f32[4,5] = softmax.int(%x, dim=-1, dtype=None)\n"
                    "  return (%0)\n"))
    assert [n.op.schema.name for n in g.nodes] == ["amax", "sub", "exp", "sum", "div"]
    verify_types(g)


def test_decompose_widens_a_float16_op_to_float32_and_rounds_once():
    """softmax over float16 decomposes in float32 between two casts (eager computes it in
    float32 and rounds once; a chain of float16 ops would round at each)."""
    text = "graph(%x: f16[4,5]):\n  %0: f16[4,5] = softmax.int(%x, dim=-1, dtype=None)\n" \
           "  return (%0)\n"
    nodes = decompose(G(text)).nodes
    first, *inner, last = nodes
    assert (first.op, first.outputs[0].type.dtype) == (ir.Op.TO_COPY, eager.float32)
    assert (last.op, last.outputs[0].type.dtype) == (ir.Op.TO_COPY, eager.float16)
    assert [n.op for n in inner] == [ir.Op.AMAX, ir.Op.SUB, ir.Op.EXP, ir.Op.SUM, ir.Op.DIV]
    assert all(v.type.dtype is eager.float32 for n in inner for v in n.outputs)


GELU_CHAIN = """
    graph(%x: f32[64,32], %w: f32[32], %b: f32[32]):
      %0: f32[64,32] = mul(%x, %w)
      %1: f32[64,32] = add(%0, %b, alpha=1)
      %2: f32[64,32] = gelu(%1, approximate="none")
      %3: f32[] = scalar(value=0.5)
      %4: f32[64,32] = mul(%2, %3)
      %5: f32[64,32] = tanh(%x)
      %6: f32[64,32] = add(%4, %5, alpha=1)
      return (%6)
    """


def test_gelu_chain_becomes_one_kernel_moving_its_bytes_once():
    g = G(GELU_CHAIN)
    o = optimize(g, verify=True)
    assert traffic(o).kernels == 1 and traffic(g).kernels == 6
    assert traffic(o).bytes_moved == (64 * 32 * 2 + 32 * 2) * 4  # x in, out, w and b
    arrays = [np.random.default_rng(0).standard_normal(s).astype(np.float32)
              for s in ((64, 32), (32,), (32,))]
    np.testing.assert_allclose(run(o, *arrays)[0], run(g, *arrays)[0], rtol=1e-6, atol=1e-6)


def test_layer_norm_rows_fuse_into_one_reduction_kernel():
    x = eager.randn(6, 8)
    import compiler
    cf = compiler.compile(lambda x: eager.nn.functional.layer_norm(x, (8,)), backend="eager")
    cf(x)
    g = next(iter(cf.entries.values())).regions[0]
    o = optimize(g, verify=True)
    assert traffic(o).kernels == 1 and o.nodes[0].attr["kind"] == "reduction"
    np.testing.assert_allclose(interpreter.run(o, [x])[0].numpy(),
                               interpreter.run(g, [x])[0].numpy(), rtol=1e-5, atol=1e-6)


def test_gemm_takes_its_epilogue_and_folds_the_transpose():
    g = G("""
        graph(%x: f32[8,16], %w: f32[32,16], %b: f32[32], %r: f32[8,32]):
          %0: f32[16,32] = t(%w)
          %1: f32[8,32] = mm(%x, %0)
          %2: f32[8,32] = add(%1, %b, alpha=1)
          %3: f32[8,32] = relu(%2)
          %4: f32[8,32] = add(%3, %r, alpha=1)
          return (%4)
        """)
    o = fuse(g)
    assert len(o.nodes) == 1 and o.nodes[0].attr["kind"] == "gemm"
    body = o.nodes[0].attr["body"]
    assert [n.op.schema.name for n in body.nodes] == ["t", "mm", "add", "relu", "add"]
    verify_types(o)


@pytest.mark.parametrize("returned", [False, True])
def test_a_prologue_joins_its_gemm_unless_its_value_is_returned_too(returned):
    """A forward that saves the prologue's value for backward returns it: inside the
    gemm kernel it would be an output computed before the product, which the GEMM's
    store cannot write, so it stays a kernel of its own."""
    g = G(f"""
        graph(%x: f32[8,16], %y: f32[16,4]):
          %0: f32[8,16] = exp(%x)
          %1: f32[8,4] = mm(%0, %y)
          return (%1{", %0" if returned else ""})
        """)
    o = fuse(g)
    verify_types(o)
    kinds = sorted(n.attr["kind"] for n in o.nodes if n.op.name == "FUSED")
    assert kinds == (["elementwise", "gemm"] if returned else ["gemm"])
    gemm = next(n for n in o.nodes if n.attr["kind"] == "gemm").attr["body"]
    assert [n.op.schema.name for n in gemm.nodes] == (["mm"] if returned else ["exp", "mm"])


def test_a_value_read_by_two_kernels_is_an_output_of_its_own():
    g = G("""
        graph(%x: f32[4,4], %y: f32[4,4]):
          %0: f32[4,4] = exp(%x)
          %1: f32[4,4] = mm(%0, %y)
          %2: f32[4,4] = neg(%0)
          %3: f32[4,4] = add(%1, %2, alpha=1)
          return (%3)
        """)
    o = fuse(g)
    verify_types(o)
    arrays = [np.eye(4, dtype=np.float32), np.ones((4, 4), np.float32)]
    np.testing.assert_allclose(run(o, *arrays)[0], run(g, *arrays)[0], rtol=1e-6)


def test_reduction_over_a_leading_dim_and_broadcast_inside_a_group():
    g = G("""
        graph(%x: f32[5,3], %s: f32[3]):
          %0: f32[5,3] = mul(%x, %s)
          %1: f32[1,3] = sum(%0, dim=[0], keepdim=True, dtype=None)
          %2: f32[5,3] = div(%0, %1)
          return (%2, %1)
        """)
    o = fuse(g)
    assert len(o.nodes) == 1 and len(o.outputs) == 2  # the intermediate is an output too
    arrays = [np.arange(15, dtype=np.float32).reshape(5, 3) + 1, np.array([1, 2, 3], np.float32)]
    for a, b in zip(run(o, *arrays), run(g, *arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


BATCH_NORM = """
    graph(%x: f32[8,16,4,4]):
      %0: f32[1,16,1,1] = mean(%x, dim=[0, 2, 3], keepdim=True, dtype=None)
      %1: f32[8,16,4,4] = sub(%x, %0, alpha=1)
      %2: f32[8,16,4,4] = mul(%1, %1)
      %3: f32[1,16,1,1] = mean(%2, dim=[0, 2, 3], keepdim=True, dtype=None)
      %4: f32[] = scalar(value=1e-05)
      %5: f32[1,16,1,1] = add(%3, %4, alpha=1)
      %6: f32[1,16,1,1] = rsqrt(%5)
      %7: f32[8,16,4,4] = mul(%1, %6)
      return (%7{})
    """


@pytest.mark.parametrize("returned", [False, True])
def test_x_minus_mean_is_computed_again_by_its_readers_unless_returned(returned):
    """BatchNorm's x - mean, read by the variance's sum and by the normalisation (which
    cannot join: the variance lies between them), is computed in both kernels instead
    of written and read back; a forward that returns it for backward writes it."""
    g = G(BATCH_NORM.format(", %1" if returned else ""))
    o = optimize(g, verify=True)
    kernels = [n.attr["body"] for n in o.nodes if n.op.name == "FUSED"]
    subtracting = [k for k in kernels if any(n.op.schema.name == "sub" for n in k.nodes)]
    assert len(subtracting) == (1 if returned else 2)
    written = [v for n in o.nodes for v in n.outputs if v.type.shape == (8, 16, 4, 4)]
    assert len(written) == (2 if returned else 1)  # the result (and x - mean)
    x = np.random.default_rng(0).standard_normal((8, 16, 4, 4)).astype(np.float32)
    for a, b in zip(run(o, x), run(g, x)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_fusion_never_makes_a_cycle():
    # %2 needs the opaque cat, which needs %0: putting %0 and %2 together would be a cycle
    g = G("""
        graph(%x: f32[4]):
          %0: f32[4] = exp(%x)
          %1: f32[8] = cat([%0, %x], dim=0)
          %2: f32[4] = slice.Tensor(%1, dim=0, start=0, end=4, step=1)
          %3: f32[4] = add(%0, %2, alpha=1)
          return (%3)
        """)
    o = fuse(g)
    verify_types(o)
    x = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(run(o, x)[0], run(g, x)[0], rtol=1e-6)


def test_memory_plan_reuses_buffers_of_dead_intermediates():
    g = G("""
        graph(%x: f32[256]):
          %0: f32[256] = exp(%x)
          %1: f32[256] = neg(%0)
          %2: f32[256] = tanh(%1)
          %3: f32[256] = sigmoid(%2)
          return (%3)
        """)
    plan = plan_memory(g)
    assert plan.bytes_without_reuse == 3 * 1024 and plan.pooled_bytes == 2 * 1024
    assert plan.output_bytes == 1024
    assert plan.buffer_of[g.nodes[0].outputs[0]] == plan.buffer_of[g.nodes[2].outputs[0]]


def test_debug_level_2_prints_every_pass(capsys):
    import compiler
    with compiler.debug(2):
        optimize(G(GELU_CHAIN))
    err = capsys.readouterr().err
    for name in ("decompose", "simplify", "cse", "fuse"):
        assert f"after {name}" in err


def test_drop_copies_keeps_a_clone_a_view_depends_on():
    text = """
        graph(%x: f32[4,6]):
          %0: f32[6,4] = t(%x)
          %1: f32[6,4] = clone(%0)
          %2: f32[24] = view(%1, size=[24])
          %3: f32[24] = exp(%2)
          return (%3)
        """
    g = G(text)
    assert str(drop_copies(g)) == str(g)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_allclose(run(optimize(g, verify=True), x)[0], np.exp(x.T.reshape(-1)),
                               rtol=1e-6)


def test_reductions_over_different_rows_stay_in_kernels_of_their_own():
    """Softmax's backward then the bias gradient: a sum over each row, ops over the same
    elements, a sum over each column. The ops between join the first reduction; the
    second is a kernel of its own (a native row kernel runs one set of rows)."""
    g = G("""
        graph(%g: f32[6,5], %p: f32[6,5]):
          %0: f32[6,1] = sum(%g, dim=[1], keepdim=True, dtype=None)
          %1: f32[6,5] = mul(%p, %0)
          %2: f32[6,5] = sub(%g, %1, alpha=1)
          %3: f32[1,5] = sum(%2, dim=[0], keepdim=True, dtype=None)
          return (%2, %3)
        """)
    o = fuse(g)
    verify_types(o)
    bodies = [[n.op.schema.name for n in node.attr["body"].nodes] for node in o.nodes]
    assert bodies == [["sum", "mul", "sub"], ["sum"]]
    arrays = [np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
              for _ in range(2)]
    for a, b in zip(run(o, *arrays), run(g, *arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_an_op_that_reaches_a_reduction_only_through_a_later_op_joins_it_too():
    """cross_entropy's mean: neg(x) * mask, then the sum. neg comes first and touches the
    sum only through mul, which joins it after neg was looked at: it joins on the next
    round, so the loss is one kernel instead of two."""
    g = G("""
        graph(%x: f32[8,1], %m: b8[8]):
          %0: f32[8] = squeeze.dims(%x, dim=[1])
          %1: f32[8] = neg(%0)
          %2: f32[8] = mul(%1, %m)
          %3: f32[] = sum(%2, dim=None, keepdim=False, dtype=None)
          return (%3)
        """)
    o = fuse(g)
    verify_types(o)
    bodies = [[n.op.schema.name for n in node.attr["body"].nodes] for node in o.nodes]
    assert bodies == [["squeeze", "neg", "mul", "sum"]]
    arrays = [np.arange(8, dtype=np.float32).reshape(8, 1), np.arange(8) % 3 == 0]
    np.testing.assert_allclose(run(o, *arrays)[0], run(g, *arrays)[0], rtol=1e-6)


def _reductions_after_split(fn, *args):
    from compiler import lower
    from compiler.passes.split_reductions import split_reductions
    graph = split_reductions(lower(fn, *args).graphs[0])  # the captured graph, split
    return [(n.op, dict(n.attrs)["dim"], dict(n.attrs)["keepdim"]) for n in graph.nodes
            if n.op in (ir.Op.SUM, ir.Op.AMAX, ir.Op.AMIN)]


@pytest.mark.parametrize("keepdim", [False, True])
def test_a_reduction_over_outer_and_trailing_dims_runs_over_the_trailing_ones_first(keepdim):
    x = eager.randn(8, 16, 8, 8)
    assert _reductions_after_split(lambda x: x.sum([0, 2, 3], keepdim=keepdim), x) == [
        (ir.Op.SUM, (2, 3), True), (ir.Op.SUM, (0, 2, 3), keepdim)]
    for fn in (lambda x: (x * 2).sum([0, 2, 3], keepdim=keepdim),
               lambda x: x.amax([0, -1, -2], keepdim=keepdim),
               lambda x: x.mean([0, 2, 3], keepdim=keepdim)):
        got = eager.compile(fn)(x).numpy()
        x64 = x.numpy().astype(np.float64)
        want = fn(eager.tensor(x64)).numpy()
        assert got.shape == want.shape
        # a float32 sum's rounding scales with the sum of its terms' magnitudes, not with
        # its result: a sum near zero of 512 terms is off by ~1e-5 in any order
        magnitude = fn(eager.tensor(np.abs(x64))).numpy()
        assert np.all(np.abs(got - want) <= 1e-6 * magnitude + 1e-6), fn


@pytest.mark.parametrize("shape,dims,dtype", [
    ((8, 512, 1, 1), [0, 2, 3], "float32"),  # a run of one element: two kernels cost more
    ((8, 16, 8, 8), [2, 3], "float32"),       # trailing dims only: rows already
    ((8, 16, 8, 8), [0, 1, 2, 3], "float32"),  # everything
    ((8, 16, 8, 8), [0, 2, 3], "int64"),       # integers keep one exact kernel
])
def test_a_reduction_that_gains_nothing_from_splitting_stays_one(shape, dims, dtype):
    x = eager.ones(*shape, dtype=getattr(eager, dtype))
    assert len(_reductions_after_split(lambda x: x.sum(dims), x)) == 1
