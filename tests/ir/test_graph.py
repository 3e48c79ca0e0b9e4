"""The graph IR: text round trip, parse errors, the verifier, networkx and DOT views."""
import pytest

import ir
from ir import GraphBuilder, Op, TensorType, dtypes
from ir.nx import to_dot, to_networkx

GRAPHS = [
    """graph(%x: f32[2,3], %w: f32[3,4]):
  %0: f32[2,4] = mm(%x, %w)
  %1: f32[2,4] = relu(%0)
  return (%1)
""",
    """graph(%x: f64[s0,8], %b: f64[8]):
  %0: f64[s0,8] = add(%x, %b, alpha=1)
  %1: f64[s0], %2: i64[s0] = max.dim(%0, dim=1, keepdim=False)
  %3: f64[] = sum(%1, dim=None, keepdim=False, dtype=None)
  return (%3, %2)
""",
    """graph(%a: f32[2,2], %b: f32[2,3]):
  %0: f32[2,5] = cat([%a, %b], dim=1)
  %1: f32[2,5] = clamp(%0, min=-inf, max=2.5)
  %2: f32[2,5] = gelu(%1, approximate="tanh")
  %3: f16[2,5] = _to_copy(%2, dtype=f16, device=None)
  %4: f32[5,2] = permute(%2, dims=[1, 0])
  return (%3, %4)
""",
    """graph(%x: f32[4,6]@cuda:0, %w: f32[5,6]@cuda:0):
  %0: f32[4,5]@cuda:0 = linear(%x, %w, None)
  return (%0)
""",
]


@pytest.mark.parametrize("text", GRAPHS)
def test_print_parse_round_trip(text):
    g = ir.parse(text)
    assert str(g) == text
    assert ir.parse(str(g)) == g
    ir.verify(g)


def test_builder_names_values_in_order():
    b = GraphBuilder()
    x = b.input(TensorType((2, 3), dtypes.float32), "x")
    (y,) = b.add(Op.EXP, [x], {}, TensorType((2, 3), dtypes.float32))
    (z,) = b.add(Op.SUM, [y], {"dim": (1,), "keepdim": False, "dtype": None},
                 TensorType((2,), dtypes.float32))
    g = b.build([z])
    assert str(g).splitlines()[1:3] == [
        "  %0: f32[2,3] = exp(%x)", "  %1: f32[2] = sum(%0, dim=[1], keepdim=False, dtype=None)"]
    assert ir.parse(str(g)) == g
    assert g.users()[y] == [g.nodes[1]]
    assert g.producers()[z] is g.nodes[1]


@pytest.mark.parametrize("text, message", [
    ("graph(%x: f32[2]):\n  %0: f32[2] = exp(%y)\n  return (%0)", "used before it is defined"),
    ("graph(%x: f32[2]):\n  %0: f32[2] = exp(%x)\n  %0: f32[2] = exp(%x)\n  return (%0)",
     "defined twice"),
    ("graph(%x: f32[2]):\n  %0: f32[2] = frobnicate(%x)\n  return (%0)", "unknown op"),
    ("graph(%x: f32[2]):\n  %0: f32[2] = exp(%x)", "no return"),
    ("graph(%x: q32[2]):\n  return (%x)", "unknown dtype"),
    ("graph(%x: f32[2]):\n  %0: f32[2] = exp(%x, bogus=1)\n  return (%0)", "no argument"),
])
def test_parse_errors_name_the_problem(text, message):
    with pytest.raises((ir.ParseError, TypeError), match=message):
        ir.parse(text)


@pytest.mark.parametrize("text, message", [
    ("graph(%x: f32[2,3]):\n  %0: f32[2,4] = mm(%x)\n  return (%0)",
     "mm takes 2 tensor inputs, got 1"),
    ("graph(%x: f32[2,3]):\n  %0: f32[2] = sum(%x, dim=[1], keepdim=1, dtype=None)\n"
     "  return (%0)", "keepdim=1 is not a bool"),
    ("graph(%x: f32[2,3]):\n  %0: f32[2] = sum(%x, keepdim=False)\n  return (%0)",
     "expects attributes"),
    ("graph(%x: f32[2,3]):\n  %0: f32[2,3] = max.dim(%x, dim=1, keepdim=False)\n"
     "  return (%0)", "defines 2 results"),
    ("graph(%x: f32[2,3]):\n  %0: f32[2,3] = linear(None, %x, None)\n  return (%0)",
     "'input' is not optional"),
])
def test_verifier_errors_show_the_node(text, message):
    with pytest.raises(ir.VerificationError, match=message) as e:
        ir.verify(ir.parse(text))
    assert "->" in str(e.value)  # the offending line is marked in context


def test_verifier_uses_a_type_rule():
    g = ir.parse("graph(%x: f32[2,3]):\n  %0: f32[3] = exp(%x)\n  return (%0)")
    ir.verify(g)
    with pytest.raises(ir.VerificationError, match="differ from the op's rule"):
        ir.verify(g, infer=lambda node: (node.inputs[0].type,))


def test_verifier_rejects_undefined_output():
    g = ir.parse(GRAPHS[0])
    bad = g.replace(outputs=(ir.Value("ghost", g.outputs[0].type),))
    with pytest.raises(ir.VerificationError, match="never defined"):
        ir.verify(bad)


def test_networkx_view_orders_topologically():
    import networkx as nx
    g = ir.parse(GRAPHS[1])
    dg = to_networkx(g)
    order = list(nx.topological_sort(dg))
    assert order.index(0) < order.index(1) < order.index(2)
    assert nx.is_directed_acyclic_graph(dg)
    assert dg.edges[0, 1]["value"] == g.nodes[0].outputs[0]


def test_dot_export_mentions_every_node_and_edge():
    g = ir.parse(GRAPHS[0])
    dot = to_dot(g)
    assert dot.startswith('digraph "graph" {') and dot.rstrip().endswith("}")
    assert "mm\\n%0: f32[2,4]" in dot and '"in_x" -> n0;' in dot and '"n1" -> "out_1";' in dot


def test_ir_does_not_import_the_rest_of_kiln():
    import subprocess
    import sys
    code = ("import sys, ir; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('eager', 'compiler', 'runtime', 'networkx', 'llvmlite')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _sample_attr(arg):
    base = arg.type.base
    if arg.type.is_list:
        return (0, 1) if base in ("int", "SymInt") else ()
    if arg.has_default and arg.default is not None:
        return arg.default
    return {"int": 1, "SymInt": 2, "float": 1.5, "bool": True, "str": "none", "Scalar": 2.5,
            "ScalarType": dtypes.float64, "Device": "cpu",
            "Graph": ir.parse(GRAPHS[0])}.get(base)


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
def test_every_op_prints_and_parses_back(op):
    t = TensorType((2, 3), dtypes.float32)
    b = GraphBuilder()
    inputs = []
    for a in op.schema.arguments:
        if a.type.base == "Tensor":
            inputs.append((b.input(t), b.input(t)) if a.type.is_list else b.input(t))
    attrs = {a.name: _sample_attr(a) for a in op.schema.arguments if a.type.base != "Tensor"}
    n_out = len(op.schema.returns) if not op.schema.returns[0].type.is_list else 2
    outs = b.add(op, inputs, attrs, [t] * n_out)
    g = b.build(list(outs))
    assert ir.parse(str(g)) == g


def test_a_symbolic_size_parses_as_a_sym_that_refuses_arithmetic_and_ordering():
    from ir.graph import Sym, SymbolicSize
    g = ir.parse("graph(%x: f32[s0,4]):\n  %0: f32[s0,4] = neg(%x)\n  return (%0)\n")
    s0 = g.inputs[0].type.shape[0]
    assert type(s0) is Sym and s0 == "s0" and s0 != 4 and s0 != 1
    for use in (lambda: s0 * 2, lambda: 2 * s0, lambda: s0 + 1, lambda: 3 > s0,
                lambda: range(s0), lambda: g.inputs[0].type.numel()):
        with pytest.raises(SymbolicSize, match="symbolic"):
            use()
