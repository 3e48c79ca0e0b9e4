"""bfloat16, int8 and int16 (with uint8 and float16 beside them) as first-class dtypes:
PyTorch's conversions bit for bit, its promotion lattice, Scalar conversion errors,
16-bit floats computing in float32 and rounding once, reductions accumulating in float32,
autograd, printing, legacy type names, numpy interop and files in both formats.
The op table runs in these dtypes against PyTorch in test_promotion.py."""
from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest

import eager
from torch_parity import require_torch, torch_to_numpy

NARROW = ["bfloat16", "int8", "int16"]
KERNEL_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                 "float32", "float64"]
# values that meet every conversion rule: ties, double rounding, overflow, wrap-around
VALUES = [0.0, -0.0, 1.5, -2.5, 0.3, 200.7, -129.5, 255.0, 256.0, 65504.0, 65520.0, 70000.0,
          3.4e38, 1e-40, 6e-8, float("nan"), float("inf"), float("-inf"),
          1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 2 ** 24 + 2 ** 16 + 1, -3.7, 1e10]


def host(t) -> np.ndarray:
    """Values of an eager or torch tensor in float64 (exact for every dtype here)."""
    t = t.detach()
    return np.asarray(t.numpy() if isinstance(t, eager.Tensor) else torch_to_numpy(t),
                      dtype=np.float64)


def outcome(lib, make):
    """`make(lib)`, or the message of the RuntimeError it raises."""
    try:
        return make(lib)
    except RuntimeError as e:
        return str(e)


def assert_same_outcome(ours, theirs, what=""):
    if isinstance(theirs, str):
        assert isinstance(ours, str) and ours == theirs, f"{what}: {ours}"
    else:
        assert not isinstance(ours, str), f"{what}: {ours}"
        assert_same(ours, theirs, what)


def assert_same(ours, theirs, what=""):
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], what
    a, b = host(ours), host(theirs)
    np.testing.assert_array_equal(a, b, err_msg=what)
    numbers = ~np.isnan(a)  # (a NaN's sign bit means nothing; PyTorch's vary by path)
    np.testing.assert_array_equal(np.signbit(a[numbers]), np.signbit(b[numbers]),
                                  err_msg=f"{what}: signs")


@pytest.mark.parametrize("src", KERNEL_DTYPES)
def test_conversions_between_every_pair_are_pytorchs_bit_for_bit(src):
    """float64 -> src -> dst for every dst: rounding (through float32 to the 16-bit
    floats, as c10 makes them from a float), saturation to inf, a float into a narrow
    integer through int32 (NaN, inf and 1e10 give 0; 200.7 -> int8 -56)."""
    torch = require_torch()
    theirs = torch.tensor(VALUES, dtype=torch.float64).to(getattr(torch, src))
    ours = eager.tensor(VALUES, dtype=eager.float64).to(getattr(eager, src))
    assert_same(ours, theirs, f"float64 -> {src}")
    for dst in KERNEL_DTYPES:
        assert_same(ours.to(getattr(eager, dst)), theirs.to(getattr(torch, dst)),
                    f"float64 -> {src} -> {dst}")


@pytest.mark.parametrize("name", NARROW + ["uint8", "float16", "int32"])
def test_tensors_made_from_python_numbers_are_pytorchs(name):
    """A 16-bit float rounds through float32 and saturates; an integer type truncates a
    float and refuses what is beyond its range (uint8 takes -2 as 254)."""
    torch = require_torch()
    signed = [-2.5, -3.7, -100, -128] if name != "uint8" else []
    values = [v for v in VALUES if abs(v) < 1e39] if name in ("bfloat16", "float16") else \
        [0, -0.0, 1.5, 0.3, 3.7, 100, 127, True, -2] + signed
    assert_same(eager.tensor(values, dtype=getattr(eager, name)),
                torch.tensor(values, dtype=getattr(torch, name)), name)
    for beyond in ([300], [200.7], [-256], [70000], [2 ** 40], [float("nan")], [1e39]):
        assert_same_outcome(outcome(eager, lambda m: m.tensor(beyond, dtype=getattr(m, name))),
                            outcome(torch, lambda m: m.tensor(beyond, dtype=getattr(m, name))),
                            f"{name} {beyond}")


@pytest.mark.parametrize("a", KERNEL_DTYPES)
def test_promote_types_is_pytorchs_for_every_pair(a):
    torch = require_torch()
    for b in KERNEL_DTYPES:
        got = eager.promote_types(getattr(eager, a), getattr(eager, b))
        assert got.name == str(torch.promote_types(getattr(torch, a), getattr(torch, b))
                               ).removeprefix("torch."), (a, b)


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32", "int64", "float16",
                                  "bfloat16", "float32", "bool"])
def test_scalar_conversions_refuse_what_pytorchs_refuse(name):
    """fill_, full, clamp, masked_fill and add's and sub's alpha take a Python number in
    the tensor's type, as PyTorch's checked Scalar conversion: -1 bounds a uint8 tensor as
    255, 300 is an error for int8, 70000 for float16, inf and NaN for any integer."""
    torch = require_torch()

    def t(m):
        return m.tensor([0, 1, 5], dtype=getattr(m, name))
    for value in (300, -1, -129, -256, 70000, 1e39, float("inf"), float("nan"), 3.7, True,
                  -1.5, -0.5):  # (an unsigned type takes -1, not -1.5 nor -0.5)
        for i, call in enumerate((lambda m: t(m).fill_(value),
                                  lambda m: m.full((2,), value, dtype=getattr(m, name)),
                                  lambda m: t(m).masked_fill(t(m) == 0, value),
                                  lambda m: m.where(t(m) == 0, t(m), value))):
            assert_same_outcome(outcome(eager, call), outcome(torch, call),
                                f"{name} {value} call {i}")
    if "int" in name:  # (PyTorch's 16-bit scalar tail rounds alpha's product: op_table)
        for alpha in (-2, 300, -129, 7):
            for op in ("add", "sub"):
                call = lambda m: getattr(m, op)(t(m), t(m), alpha=alpha)  # noqa: E731
                assert_same_outcome(outcome(eager, call), outcome(torch, call),
                                    f"{name} {op} alpha={alpha}")
    if name in ("uint8", "int8"):
        for bounds in ((-1, 1), (-200, 300), (0, 255)):
            assert_same_outcome(outcome(eager, lambda m: t(m).clamp(*bounds)),
                                outcome(torch, lambda m: t(m).clamp(*bounds)), f"{bounds}")


def test_narrow_integers_wrap_and_promote_as_pytorchs():
    torch = require_torch()
    cases = [lambda m, a, b: a + 300, lambda m, a, b: a * 100, lambda m, a, b: a - b,
             lambda m, a, b: a * b, lambda m, a, b: -a, lambda m, a, b: a.sum(),
             lambda m, a, b: b.sum(), lambda m, a, b: a.cumsum(0), lambda m, a, b: a / b,
             lambda m, a, b: a == b, lambda m, a, b: a.max(), lambda m, a, b: a & b,
             lambda m, a, b: a.abs(), lambda m, a, b: a.to(m.uint8) - 2,
             lambda m, a, b: a + b.to(m.uint8), lambda m, a, b: a.to(m.uint8) * 2.5]
    for i, case in enumerate(cases):
        made = []
        for lib in (torch, eager):
            a = lib.tensor([100, -7, 127, 0], dtype=lib.int8)
            b = lib.tensor([300, 2, -1, 30000], dtype=lib.int16)
            made.append(case(lib, a, b))
        assert_same(made[1], made[0], f"case {i}")


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_sixteen_bit_floats_accumulate_in_float32(name):
    """A sum, mean or cumsum of 4096 ones and small values: in 16 bits the running sum
    would stop growing (bfloat16 holds 256 + 1 as 256); PyTorch accumulates in float32."""
    torch = require_torch()
    values = np.tile([1.0, 0.001, 0.3, 2.5], 1024)
    for fn in (lambda t: t.sum(), lambda t: t.mean(), lambda t: t.sum(0),
               lambda t: t.reshape(64, 64).sum(1), lambda t: t.reshape(64, 64).mean(0)):
        ours = fn(eager.tensor(values, dtype=getattr(eager, name)))
        theirs = fn(torch.tensor(values, dtype=getattr(torch, name)))
        assert_same(ours, theirs, name)
        exact = fn(eager.tensor(values, dtype=getattr(eager, name)).double())
        np.testing.assert_allclose(host(ours), host(exact), rtol=2 ** -7)
    ours = eager.tensor(values, dtype=getattr(eager, name)).cumsum(0)
    theirs = torch.tensor(values, dtype=getattr(torch, name)).cumsum(0)
    np.testing.assert_allclose(host(ours), host(theirs), rtol=2 ** -7)
    assert host(ours)[-1] > 3000  # (a 16-bit running sum stalls far below 3804)


def test_bfloat16_training_step_matches_pytorch():
    """An MLP's forward, backward and SGD step in bfloat16, weights alike: the loss and
    every gradient within bfloat16's rounding of PyTorch's."""
    torch = require_torch()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.3
              for s in ((16, 12), (32, 12), (32,), (5, 32), (5,))]
    target = rng.integers(0, 5, 16)
    results = []
    for lib in (torch, eager):
        x, w1, b1, w2, b2 = (lib.tensor(a).to(lib.bfloat16) for a in arrays)
        params = [w1, b1, w2, b2]
        for p in params:
            p.requires_grad_(True)
        h = lib.nn.functional.gelu(lib.nn.functional.linear(x, w1, b1))
        logits = lib.nn.functional.linear(h, w2, b2)
        loss = lib.nn.functional.cross_entropy(logits, lib.tensor(target))
        loss.backward()
        assert loss.dtype == lib.bfloat16 and all(p.grad.dtype == lib.bfloat16 for p in params)
        results.append([loss] + [p.grad for p in params])
    for i, (theirs, ours) in enumerate(zip(*results)):
        np.testing.assert_allclose(host(ours), host(theirs), rtol=3e-2, atol=3e-3,
                                   err_msg=f"output {i}")


def test_bfloat16_prints_and_names_its_type_as_pytorch():
    torch = require_torch()
    for values in ([1.5, 2.25, 3.0], [1e-5, 3e4], [0.1, -7.0, 1e10]):
        ours = repr(eager.tensor(values, dtype=eager.bfloat16))
        assert ours == repr(torch.tensor(values, dtype=torch.bfloat16)).replace("torch", "eager")
    for name in ("bfloat16", "int8", "int16", "uint8", "float32", "bool"):
        t, tt = eager.zeros(2, dtype=getattr(eager, name)), torch.zeros(2, dtype=getattr(torch, name))
        assert t.type() == tt.type()
        assert eager.ones(2).type(tt.type()).dtype is t.dtype
    x = eager.ones(2)
    assert (x.bfloat16().dtype, x.short().dtype, x.char().dtype, x.byte().dtype) == (
        eager.bfloat16, eager.int16, eager.int8, eager.uint8)
    assert isinstance(x.char(), eager.CharTensor) and not isinstance(x, eager.CharTensor)
    assert eager.BFloat16Tensor([1, 2]).dtype is eager.bfloat16
    layer = eager.nn.Linear(3, 2).bfloat16()
    assert layer.weight.dtype is eager.bfloat16 and layer.weight.requires_grad


def test_numpy_interop_keeps_the_narrow_types():
    """numpy() of a bfloat16 tensor is an ml_dtypes bfloat16 array sharing the memory
    (PyTorch refuses; JAX gives the same), and from_numpy takes one back."""
    x = eager.tensor([1.5, -2.0], dtype=eager.bfloat16)
    a = x.numpy()
    assert a.dtype == ml_dtypes.bfloat16
    a[0] = 4.0
    assert x.tolist() == [4.0, -2.0]
    y = eager.from_numpy(np.array([0.5, 3.0], dtype=ml_dtypes.bfloat16))
    assert y.dtype is eager.bfloat16 and y.tolist() == [0.5, 3.0]
    for name in ("int8", "int16"):
        z = eager.from_numpy(np.array([1, -2], dtype=name))
        assert z.dtype is getattr(eager, name) and z.tolist() == [1, -2]
    assert isinstance(x[0].item(), float) and isinstance(z[0].item(), int)


@pytest.mark.parametrize("name", NARROW)
def test_files_round_trip_in_both_formats_and_read_pytorchs(name):
    torch = require_torch()
    values = [[1.5, -2.0, 0.3], [100.0, -7.0, 65.0]]
    ours = eager.tensor(values, dtype=getattr(eager, name))
    for fmt in ("kiln", "torch"):
        buf = io.BytesIO()
        eager.save({"w": ours, "wt": ours.t()}, buf, format=fmt)
        buf.seek(0)
        back = eager.load(buf)
        assert_same(back["w"], ours, fmt)
        assert_same(back["wt"], ours.t(), fmt)
        if fmt == "torch":
            buf.seek(0)
            assert_same(ours, torch.load(buf)["w"], "kiln's torch file in torch")
    buf = io.BytesIO()
    theirs = torch.tensor(values, dtype=getattr(torch, name))
    torch.save({"w": theirs.t()}, buf)
    buf.seek(0)
    assert_same(eager.load(buf)["w"], theirs.t(), "torch's file in kiln")


@pytest.mark.parametrize("name", ["bfloat16", "int8", "int16"])
def test_compiled_functions_over_narrow_dtypes_give_eagers_values(name):
    """The native code generators have no kernels for these types yet: a compiled
    function runs their nodes through eager's kernels and gives eager's values."""
    def fn(x, y):
        return (x * y + x).sum(0), (x - y).abs().amax(1)
    rng = np.random.default_rng(1)
    dt = getattr(eager, name)
    x = eager.tensor(rng.integers(-20, 20, (6, 5)).astype(np.float32)).to(dt)
    y = eager.tensor(rng.integers(-20, 20, (6, 5)).astype(np.float32)).to(dt)
    for got, want in zip(eager.compile(fn)(x, y), fn(x, y)):
        assert_same(got, want, name)
