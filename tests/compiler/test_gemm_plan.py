"""plan_gemm_node on fused gemm bodies written as IR text: what runs before the product,
the product and its transpose flags, what the GEMM's store takes, the rest of the
epilogue, and the bodies it refuses, with their reasons. (test_native.py runs such
bodies and checks their values.)"""
import textwrap

import pytest

import ir
from compiler.backends.gemm_plan import plan_gemm_node
from runtime.layout import CannotLower


def G(text: str) -> ir.Graph:
    return ir.parse(textwrap.dedent(text))


def text(graph: ir.Graph | None) -> str | None:
    return None if graph is None else str(graph)


def dedent(graph_text: str) -> str:
    return textwrap.dedent(graph_text).lstrip("\n")


def product(plan) -> str:
    """The product and its store in one line: `mm(a0, a1.T) store(...) -> %3`."""
    a, b = (v.name + (".T" if flag else "") for v, flag in zip(plan.operands,
                                                               plan.transposes))
    store = plan.store
    steps = [f"bias={store.bias.name}" if store.bias else "",
             store.activation or "", f"scale={store.scale}" if store.scale != 1 else "",
             f"residual={store.residual.name}" if store.residual else ""]
    return (f"{'bmm' if plan.batched else 'mm'}({a}, {b}) "
            f"store({' '.join(s for s in steps if s)}) -> %{plan.result.name}")


def test_a_bare_product_of_inputs_is_called_by_index():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[3,5]):
          %0: f32[4,5] = mm(%a0, %a1)
          return (%0)
        """))
    assert product(plan) == "mm(a0, a1) store() -> %0"
    assert plan.prologue is None and plan.rest is None and plan.store.nodes == ()
    assert plan.input_positions == (0, 1, None, None) and plan.specialise


def test_linear_reads_its_weight_through_the_transpose_flag_and_stores_bias_and_relu():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[5,3], %a2: f32[5]):
          %0: f32[3,5] = t(%a1)
          %1: f32[4,5] = mm(%a0, %0)
          %2: f32[4,5] = add(%1, %a2, alpha=1)
          %3: f32[4,5] = relu(%2)
          return (%3)
        """))
    assert product(plan) == "mm(a0, a1.T) store(bias=a2 relu) -> %3"
    assert plan.prologue is None and plan.rest is None
    assert [n.op.schema.name for n in plan.store.nodes] == ["add", "relu"]
    assert plan.input_positions == (0, 1, 2, None)


def test_the_store_takes_bias_activation_scale_and_residual_in_its_order():
    """The scale's constant defined before the product: all four steps are the
    store's."""
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[3,5], %a2: f32[5], %a3: f32[4,5]):
          %0: f32[] = scalar(value=0.5)
          %1: f32[4,5] = mm(%a0, %a1)
          %2: f32[4,5] = add(%1, %a2, alpha=1)
          %3: f32[4,5] = gelu(%2, approximate="tanh")
          %4: f32[4,5] = mul(%3, %0)
          %5: f32[4,5] = add(%4, %a3, alpha=1)
          return (%5)
        """))
    assert product(plan) == "mm(a0, a1) store(bias=a2 gelu_tanh scale=0.5 residual=a3) -> %5"
    assert plan.rest is None
    assert text(plan.prologue) == dedent("""
        graph(%a0: f32[4,3], %a1: f32[3,5], %a2: f32[5], %a3: f32[4,5]):
          %0: f32[] = scalar(value=0.5)
          return (%0)
        """)
    assert plan.input_positions is None  # the prologue makes the constant


@pytest.mark.parametrize("node, activation", [
    ('relu(%0)', "relu"), ('tanh(%0)', "tanh"), ('silu(%0)', "silu"),
    ('gelu(%0, approximate="none")', "gelu"), ('gelu(%0, approximate="tanh")', "gelu_tanh")])
def test_each_activation_of_the_store(node, activation):
    plan = plan_gemm_node(G(f"""
        graph(%a0: f64[2,3], %a1: f64[3,2]):
          %0: f64[2,2] = mm(%a0, %a1)
          %1: f64[2,2] = {node}
          return (%1)
        """))
    assert product(plan) == f"mm(a0, a1) store({activation}) -> %1"


def test_bmm_with_a_bias_and_a_transpose_of_the_last_two_dims():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[2,4,3], %a1: f32[2,5,3], %a2: f32[5]):
          %0: f32[2,3,5] = transpose.int(%a1, dim0=-1, dim1=1)
          %1: f32[2,4,5] = bmm(%a0, %0)
          %2: f32[2,4,5] = add(%1, %a2, alpha=1)
          return (%2)
        """))
    assert product(plan) == "bmm(a0, a1.T) store(bias=a2) -> %2"
    assert plan.input_positions == (0, 1, 2, None)


def test_transposes_the_flags_cannot_take_stay_in_the_prologue():
    """A transpose of dims 0 and 1 of a batch, one of a computed value, one read twice."""
    plan = plan_gemm_node(G("""
        graph(%a0: f32[3,2,4], %a1: f32[2,4,5]):
          %0: f32[2,3,4] = transpose.int(%a0, dim0=0, dim1=1)
          %1: f32[2,4,5] = exp(%a1)
          %2: f32[2,3,5] = bmm(%0, %1)
          return (%2)
        """))
    assert product(plan) == "bmm(0, 1) store() -> %2"
    assert plan.input_positions is None
    assert text(plan.prologue) == dedent("""
        graph(%a0: f32[3,2,4], %a1: f32[2,4,5]):
          %0: f32[2,3,4] = transpose.int(%a0, dim0=0, dim1=1)
          %1: f32[2,4,5] = exp(%a1)
          return (%0, %1)
        """)
    computed = plan_gemm_node(G("""
        graph(%a0: f32[4,4]):
          %0: f32[4,4] = exp(%a0)
          %1: f32[4,4] = t(%0)
          %2: f32[4,4] = mm(%a0, %1)
          return (%2)
        """))
    assert computed.transposes == (False, False) and len(computed.prologue.nodes) == 2
    read_twice = plan_gemm_node(G("""
        graph(%a0: f32[4,4]):
          %0: f32[4,4] = t(%a0)
          %1: f32[4,4] = mm(%a0, %0)
          %2: f32[4,4] = add(%1, %0, alpha=1)
          return (%2)
        """))
    assert read_twice.transposes == (False, False)
    assert product(read_twice) == "mm(a0, 0) store() -> %1"


def test_a_folded_transpose_leaves_the_prologue_what_the_other_operand_needs():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[5,3]):
          %0: f32[3,5] = t(%a1)
          %1: f32[4,3] = neg(%a0)
          %2: f32[4,5] = mm(%1, %0)
          return (%2)
        """))
    assert product(plan) == "mm(1, a1.T) store() -> %2"
    assert text(plan.prologue) == dedent("""
        graph(%a0: f32[4,3], %a1: f32[5,3]):
          %1: f32[4,3] = neg(%a0)
          return (%1)
        """)


def test_the_rest_of_the_epilogue_is_one_elementwise_graph_over_the_store_s_result():
    """A scale whose constant follows the product ends the store (the constant stands
    between two steps) and is copied into the rest; an input the rest reads is its
    input."""
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[3,5], %a2: f32[5], %a3: f32[4,5]):
          %0: f32[4,5] = mm(%a0, %a1)
          %1: f32[4,5] = add(%0, %a2, alpha=1)
          %2: f32[] = scalar(value=0.125)
          %3: f32[4,5] = mul(%1, %2)
          %4: f32[4,5] = sub(%3, %a3, alpha=1)
          return (%4)
        """))
    assert product(plan) == "mm(a0, a1) store(bias=a2) -> %1"
    assert plan.input_positions is None
    assert [v.name for v in plan.rest_inputs] == ["a3"]
    assert [v.name for v in plan.rest_outputs] == ["4"]
    assert text(plan.rest) == dedent("""
        graph(%a0: f32[4,5], %a3: f32[4,5]):
          %0: f32[] = scalar(value=0.125)
          %1: f32[4,5] = mul(%a0, %0)
          %2: f32[4,5] = sub(%1, %a3, alpha=1)
          return (%2)
        """)


@pytest.mark.parametrize("why, steps, store", [
    ("bias after the activation", ["%1: f32[4,5] = relu(%0)",
                                   "%2: f32[4,5] = add(%1, %a2, alpha=1)"], "store(relu) -> %1"),
    ("two activations", ["%1: f32[4,5] = relu(%0)", "%2: f32[4,5] = tanh(%1)"],
     "store(relu) -> %1"),
    ("a residual that broadcasts", ["%1: f32[4,5] = add(%0, %a3, alpha=1)",
                                    "%2: f32[4,5] = exp(%1)"], "store() -> %0"),
    ("a result that changes the type", ["%1: f32[2,4,5] = add(%0, %a4, alpha=1)",
                                        "%2: f32[2,4,5] = exp(%1)"], "store() -> %0"),
    ("an add with alpha", ["%1: f32[4,5] = add(%0, %a2, alpha=2)", "%2: f32[4,5] = exp(%1)"],
     "store() -> %0"),
])
def test_what_the_store_does_not_take_goes_to_the_rest(why, steps, store):
    plan = plan_gemm_node(ir.parse(
        "graph(%a0: f32[4,3], %a1: f32[3,5], %a2: f32[5], %a3: f32[1,5], %a4: f32[2,4,5]):\n"
        "  %0: f32[4,5] = mm(%a0, %a1)\n" + "".join(f"  {step}\n" for step in steps)
        + "  return (%2)\n"))
    assert product(plan).endswith(store), why
    assert plan.rest is not None and [v.name for v in plan.rest_outputs] == ["2"]


def test_a_bias_made_inside_the_body_is_the_rest_s():
    """The store reads its operands as given: a bias computed before the product (here
    a negation) is added in the rest."""
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[3,5], %a2: f32[5]):
          %0: f32[5] = neg(%a2)
          %1: f32[4,5] = mm(%a0, %a1)
          %2: f32[4,5] = add(%1, %0, alpha=1)
          return (%2)
        """))
    assert product(plan) == "mm(a0, a1) store() -> %1"
    assert [v.name for v in plan.rest_inputs] == ["0"]
    assert [v.name for v in plan.prologue.outputs] == ["0"]


def test_a_product_that_is_an_output_too_leaves_its_epilogue_to_the_rest():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[4,3], %a1: f32[3,5]):
          %0: f32[4,5] = mm(%a0, %a1)
          %1: f32[4,5] = relu(%0)
          return (%0, %1)
        """))
    assert product(plan) == "mm(a0, a1) store() -> %0"
    assert [v.name for v in plan.rest_outputs] == ["1"] and plan.input_positions is None


def test_symbolic_sizes_keep_to_the_shape_generic_kernels():
    plan = plan_gemm_node(G("""
        graph(%a0: f32[s0,3], %a1: f32[3,5]):
          %0: f32[s0,5] = mm(%a0, %a1)
          return (%0)
        """))
    assert not plan.specialise


@pytest.mark.parametrize("body, reason", [
    ("""
        graph(%a0: f32[4,4]):
          %0: f32[4,4] = mm(%a0, %a0)
          %1: f32[4,4] = mm(%0, %a0)
          return (%1)
        """, "a gemm kernel with other than one matrix product"),
    ("""
        graph(%a0: i64[4,4]):
          %0: i64[4,4] = mm(%a0, %a0)
          return (%0)
        """, "int64 matrix products"),
    ("""
        graph(%a0: f32[4,4]):
          %0: f32[4,4] = exp(%a0)
          %1: f32[4,4] = mm(%0, %a0)
          return (%1, %0)
        """, "a gemm kernel whose outputs are not its product's epilogue"),
])
def test_bodies_it_refuses_say_why(body, reason):
    with pytest.raises(CannotLower) as refused:
        plan_gemm_node(G(body))
    assert str(refused.value) == reason
