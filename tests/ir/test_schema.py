"""Schemas: PyTorch's text form parses into typed signatures and prints back unchanged."""
import pytest

from ir.ops import INPLACE, VIEW, Op
from ir.schema import parse_schema


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
def test_every_op_schema_round_trips(op):
    schema = op.schema
    assert parse_schema(str(schema)) == schema
    assert str(parse_schema(str(schema))) == str(schema)
    # printing loses nothing of the declaration but spacing
    assert str(schema).replace(" ", "") == op.value.replace(" ", "")


def test_defaults_parse_to_python_values():
    s = parse_schema('f(Tensor self, int dim=-1, float eps=1e-05, bool keepdim=False, '
                     'str mode="none", int[] dims=[], int[2] pad=[1,2], Scalar? min=None) '
                     '-> Tensor')
    defaults = {a.name: a.default for a in s.arguments if a.has_default}
    assert defaults == {"dim": -1, "eps": 1e-05, "keepdim": False, "mode": "none", "dims": (),
                        "pad": (1, 2), "min": None}
    assert not s.arguments[0].has_default
    assert parse_schema(str(s)) == s


def test_kwarg_only_arguments_follow_the_star():
    s = Op.ADD.schema
    assert [(a.name, a.kwarg_only) for a in s.arguments] == [
        ("self", False), ("other", False), ("alpha", True)]
    assert str(s) == "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"


def test_mutable_and_alias_annotations():
    s = Op.ADD_.schema
    assert s.arguments[0].type.alias == "a" and s.arguments[0].type.mutable
    assert s.returns[0].type.alias == "a" and s.returns[0].type.mutable
    assert s.is_mutable and s.mutated_args == ("self",) and not s.is_view
    view = Op.TRANSPOSE.schema
    assert view.is_view and not view.is_mutable
    assert str(view.arguments[0].type) == "Tensor(a)"
    assert Op.MUL_ in INPLACE and Op.ADD not in INPLACE
    assert Op.VIEW in VIEW and Op.CLONE not in VIEW


def test_wildcard_alias_set_is_kept():
    s = Op.SPLIT.schema
    arg = s.arguments[0].type
    assert (arg.alias, arg.alias_after, arg.mutable) == ("a", "*", False)
    assert str(arg) == "Tensor(a -> *)"
    ret = s.returns[0].type
    assert ret.is_tensor_list and ret.alias == "a"


@pytest.mark.parametrize("text, base, optional, is_list, list_size, elem_optional", [
    ("Tensor? bias", "Tensor", True, False, None, False),
    ("int[] dims", "int", False, True, None, False),
    ("int[1]? dim", "int", True, True, 1, False),
    ("SymInt[2] size", "SymInt", False, True, 2, False),
    ("Tensor[] tensors", "Tensor", False, True, None, False),
    ("Tensor?[] indices", "Tensor", False, True, None, True),
    ("ScalarType? dtype", "ScalarType", True, False, None, False),
])
def test_optional_and_list_types(text, base, optional, is_list, list_size, elem_optional):
    s = parse_schema(f"f({text}) -> Tensor")
    t = s.arguments[0].type
    assert (t.base, t.optional, t.is_list, t.list_size, t.elem_optional) == (
        base, optional, is_list, list_size, elem_optional)
    assert str(t) == text.split()[0]
    assert t.is_tensor == (base == "Tensor" and not is_list)
    assert t.is_tensor_list == (base == "Tensor" and is_list)
    assert parse_schema(str(s)) == s


def test_returns_named_tuple_and_none():
    s = Op.MAX_DIM.schema
    assert (s.name, s.overload, s.qualified_name) == ("max", "dim", "max.dim")
    assert [(r.name, str(r.type)) for r in s.returns] == [("values", "Tensor"),
                                                          ("indices", "Tensor")]
    empty = parse_schema("_foo(Tensor(a!) self) -> ()")
    assert empty.returns == () and str(empty) == "_foo(Tensor(a!) self) -> ()"


def test_differences_make_schemas_unequal():
    base = parse_schema("f(Tensor self, int dim=0) -> Tensor")
    for other in ["f(Tensor self, int dim=1) -> Tensor", "f(Tensor self, *, int dim=0) -> Tensor",
                  "f(Tensor(a!) self, int dim=0) -> Tensor", "f(Tensor? self, int dim=0) -> Tensor",
                  "f(Tensor self, int[] dim=0) -> Tensor", "f.o(Tensor self, int dim=0) -> Tensor"]:
        assert parse_schema(other) != base, other


def test_bind_maps_arguments_and_reports_mistakes():
    s = Op.ADD.schema
    assert s.bind((1, 2), {}) == {"self": 1, "other": 2, "alpha": 1}
    assert s.bind((1,), {"other": 2, "alpha": 3}) == {"self": 1, "other": 2, "alpha": 3}
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        s.bind((1, 2, 3), {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'beta'"):
        s.bind((1, 2), {"beta": 1})
    with pytest.raises(TypeError, match="multiple values for argument 'other'"):
        s.bind((1, 2), {"other": 2})
    with pytest.raises(TypeError, match="missing required argument 'other'"):
        s.bind((1,), {})


@pytest.mark.parametrize("text", ["f(Tensor) -> Tensor", "f(Tensor self -> Tensor",
                                  "f(Tensor<a> self) -> Tensor", "f(int x=[1,) -> Tensor"])
def test_malformed_schemas_are_rejected(text):
    with pytest.raises(ValueError):
        parse_schema(text)
