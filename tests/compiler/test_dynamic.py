"""compiler/dynamic.py on graphs written as text: a family's skeleton, generalization
(anti-unification of sizes) and binding a graph to a symbolic one."""
import pytest

from compiler import dynamic
from compiler.passes.rewrite import infer_types
from ir import parse
from ir.graph import Sym, SymbolicSize, TensorType, Value
from ir.ops import Op
from ir.dtypes import float32


def G(text: str):
    return parse(text.strip() + "\n")


def softmax_times(rows: int, cols: int = 5, scale: float = 2.0, dim: int = -1):
    return G(f"""
graph(%x0: f32[{rows},{cols}]):
  %0: f32[{rows},{cols}] = softmax.int(%x0, dim={dim}, dtype=None)
  %1: f64[] = scalar(value={scale})
  %2: f32[{rows},{cols}] = mul(%0, %1)
  return (%2)""")


def test_graphs_that_differ_in_sizes_alone_share_a_skeleton():
    assert dynamic.skeleton(softmax_times(3)) == dynamic.skeleton(softmax_times(7, 9))
    assert dynamic.skeleton(softmax_times(3)) != dynamic.skeleton(softmax_times(3, dim=0))
    assert dynamic.skeleton(softmax_times(3)) != dynamic.skeleton(softmax_times(3, scale=3.0))


def test_signed_zeros_and_number_types_of_attributes_tell_skeletons_apart():
    assert dynamic.skeleton(softmax_times(3, scale=0.0)) != \
        dynamic.skeleton(softmax_times(3, scale=-0.0))


def test_two_sizes_generalize_to_a_symbol_that_binds_every_instance():
    general = dynamic.generalize(softmax_times(3), softmax_times(7))
    assert str(general) == str(softmax_times("s0"))
    assert dynamic.bind(general, softmax_times(12)) == {"s0": 12}
    assert type(general.inputs[0].type.shape[0]) is Sym


def test_sizes_0_and_1_never_become_symbols():
    assert dynamic.generalize(softmax_times(1), softmax_times(7)) is None
    assert dynamic.generalize(softmax_times(0), softmax_times(7)) is None
    general = dynamic.generalize(softmax_times(3), softmax_times(7))
    assert dynamic.bind(general, softmax_times(1)) is None
    assert dynamic.bind(general, softmax_times(0)) is None


def test_a_pair_of_sizes_seen_twice_is_one_symbol_and_binds_equal_sizes_only():
    def add(a, b):
        return G(f"""
graph(%x0: f32[{a},{b}], %x1: f32[{b},{a}]):
  %0: f32[{a},{a}] = mm(%x0, %x1)
  return (%0)""")
    general = dynamic.generalize(add(3, 4), add(5, 6))
    assert dynamic.symbols_of(general) == ["s0", "s1"]
    assert dynamic.bind(general, add(8, 9)) == {"s0": 8, "s1": 9}
    square = dynamic.generalize(add(3, 3), add(5, 5))
    assert dynamic.symbols_of(square) == ["s0"]
    assert dynamic.bind(square, add(8, 9)) is None


def test_a_size_only_an_intermediate_value_has_keeps_graphs_apart():
    """A slice's length that Python computed: the code could not read it from inputs."""
    def halves(cols, keep):
        return G(f"""
graph(%x0: f32[5,{cols}]):
  %0: f32[5,{keep}] = slice.Tensor(%x0, dim=-1, start=None, end={keep}, step=1)
  return (%0)""")
    assert dynamic.generalize(halves(4, 2), halves(6, 2)) is not None
    assert dynamic.generalize(halves(4, 2), halves(6, 3)) is None


def test_result_types_over_symbols_follow_the_symbols():
    x = Value("x", TensorType((Sym("s0"), 4), float32))
    w = Value("w", TensorType((4, Sym("s1")), float32))
    (t,) = infer_types(Op.MM, [x, w], ())
    assert t.shape == ("s0", "s1") and all(type(d) is Sym for d in t.shape)
    with pytest.raises(SymbolicSize, match="none of them"):
        infer_types(Op.VIEW, [x], (("size", (-1,)),))  # 4 * s0: no symbol
