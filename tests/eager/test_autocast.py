"""torch.autocast on the CPU (bfloat16, and float16 when asked) and GradScaler, against
PyTorch: which ops run in 16 bits, which in float32, the values, a training step's
gradients, nesting and the decorator, the weight-cast cache, float64 left alone, a
compiled function under autocast, and the loss scale's backoff and growth."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
from torch_parity import require_torch, torch_to_numpy

F_CASES = {  # name -> fn(lib, x, w, t): each spelled the same for eager and torch
    "mm": lambda m, x, w, t: m.mm(x, w.t()),
    "matmul 3-d": lambda m, x, w, t: m.matmul(x.reshape(2, 2, 6), w.t()),
    "@": lambda m, x, w, t: x @ w.t(),
    "linear": lambda m, x, w, t: m.nn.functional.linear(x, w, w[:, 0]),
    "linear 3-d": lambda m, x, w, t: m.nn.functional.linear(x.reshape(2, 2, 6), w),
    "addmm": lambda m, x, w, t: m.addmm(w[:, 0], x, w.t()),
    "bmm": lambda m, x, w, t: m.bmm(x.reshape(2, 2, 6), w[:4].reshape(2, 6, 2)),
    "conv2d": lambda m, x, w, t: m.nn.functional.conv2d(x.reshape(1, 1, 4, 6), w[:2, :4]
                                                        .reshape(2, 1, 2, 2)),
    "conv1d": lambda m, x, w, t: m.nn.functional.conv1d(x.reshape(1, 4, 6), w[:3, :4]
                                                        .reshape(3, 4, 1)),
    "cross_entropy": lambda m, x, w, t: m.nn.functional.cross_entropy(x @ w.t(), t),
    "mse_loss": lambda m, x, w, t: m.nn.functional.mse_loss(x @ w.t(), (x @ w.t()).detach()
                                                            * 0.5),
    "nll_loss": lambda m, x, w, t: m.nn.functional.nll_loss((x @ w.t()).log_softmax(1), t),
    "softmax of a product": lambda m, x, w, t: (x @ w.t()).softmax(1),
    "relu of a product": lambda m, x, w, t: m.relu(x @ w.t()),
    "sum of a product": lambda m, x, w, t: (x @ w.t()).sum(),
    "cat, promoted": lambda m, x, w, t: m.cat([x @ w.t(), w[:, :5]]),
    "stack, promoted": lambda m, x, w, t: m.stack([x[:, :5] @ w[:, :5], w[:4, :5]]),
    "float64 stays": lambda m, x, w, t: x.double() @ w.double().t(),
    "add": lambda m, x, w, t: x + x,
    "scaled_dot_product_attention": lambda m, x, w, t:
        m.nn.functional.scaled_dot_product_attention(x.reshape(1, 4, 6), x.reshape(1, 4, 6),
                                                     w[:4].reshape(1, 4, 6)),
}


def _inputs(lib):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    w = lib.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    return x, w, lib.tensor([0, 3, 1, 4])


def _values(t) -> np.ndarray:
    return np.asarray(t.detach().numpy() if isinstance(t, eager.Tensor) else torch_to_numpy(t),
                      np.float64)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(F_CASES))
def test_each_op_runs_in_pytorchs_dtype_with_pytorchs_values(name, dtype):
    torch = require_torch()
    results = []
    for lib in (torch, eager):
        with lib.autocast("cpu", dtype=getattr(lib, dtype)):
            results.append(F_CASES[name](lib, *_inputs(lib)))
    theirs, ours = results
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    tol = 2 ** -7 if dtype == "bfloat16" else 2 ** -10  # within a rounding of PyTorch's
    np.testing.assert_allclose(_values(ours), _values(theirs), rtol=2 * tol, atol=2 * tol)


def test_a_training_step_under_autocast_matches_pytorchs():
    """A float32 MLP: forward under autocast, backward outside (as PyTorch's recipe);
    the loss is float32 (cross_entropy runs in float32), the weights' gradients are
    float32 (autocast's casts are recorded: ToCopyBackward0), equal to PyTorch's."""
    torch = require_torch()
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.4
              for s in ((16, 12), (32, 12), (32,), (5, 32), (5,))]
    target = rng.integers(0, 5, 16)
    results = []
    for lib in (torch, eager):
        x, *params = (lib.tensor(a) for a in arrays)
        for p in params:
            p.requires_grad_(True)
        with lib.autocast("cpu"):
            h = lib.relu(lib.nn.functional.linear(x, params[0], params[1]))
            logits = lib.nn.functional.linear(h, params[2], params[3])
            loss = lib.nn.functional.cross_entropy(logits, lib.tensor(target))
        assert logits.dtype == lib.bfloat16 and loss.dtype == lib.float32
        loss.backward()
        assert all(p.grad.dtype == lib.float32 for p in params)
        results.append([loss] + [p.grad for p in params])
    for i, (theirs, ours) in enumerate(zip(*results)):
        np.testing.assert_allclose(_values(ours), _values(theirs), rtol=2e-2, atol=2e-3,
                                   err_msg=f"output {i}")


def test_nesting_the_decorator_and_the_state_functions():
    x, w, _ = _inputs(eager)
    assert not eager.is_autocast_enabled("cpu")
    with eager.autocast("cpu"):
        assert eager.is_autocast_enabled("cpu") and (x @ w.t()).dtype is eager.bfloat16
        assert eager.get_autocast_dtype("cpu") is eager.bfloat16
        with eager.autocast("cpu", enabled=False):
            assert not eager.is_autocast_enabled("cpu") and (x @ w.t()).dtype is eager.float32
        with eager.autocast("cpu", dtype=eager.float16):
            assert (x @ w.t()).dtype is eager.float16
        assert (x @ w.t()).dtype is eager.bfloat16
    assert not eager.is_autocast_enabled("cpu") and (x @ w.t()).dtype is eager.float32

    @eager.autocast("cpu")
    def product(a, b):
        return a @ b.t()
    assert product(x, w).dtype is eager.bfloat16 and (x @ w.t()).dtype is eager.float32
    with eager.cpu.amp.autocast():
        assert (x @ w.t()).dtype is eager.bfloat16
        assert eager.is_autocast_cpu_enabled() and eager.get_autocast_cpu_dtype() is \
            eager.bfloat16
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        eager.autocast("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with eager.autocast("cpu", dtype=eager.float64):
            assert (x @ w.t()).dtype is eager.float32  # refused: autocast is off
    assert "Disabling autocast" in str(caught[0].message)


def test_a_weight_is_cast_once_per_autocast_region():
    _, w, _ = _inputs(eager)
    w.requires_grad_(True)
    x = eager.randn(3, 6)
    with eager.profiler.profile() as prof:
        with eager.autocast("cpu"):
            for _ in range(4):
                eager.nn.functional.linear(x, w)  # (w.t() would be no leaf: not cached)
    casts = [e for e in prof.events() if e.name == "aten::_to_copy"]
    assert len(casts) == 1 + 4  # the weight once (cached), the activation each time
    with eager.profiler.profile() as prof:
        with eager.autocast("cpu", cache_enabled=False):
            for _ in range(4):
                eager.nn.functional.linear(x, w)
    assert len([e for e in prof.events() if e.name == "aten::_to_copy"]) == 8


def test_a_compiled_function_under_autocast_gives_eagers_values():
    x, w, t = _inputs(eager)

    def step(x, w, t):
        with eager.autocast("cpu"):
            return eager.nn.functional.cross_entropy(eager.relu(x @ w.t()) @ w, x.argmax(1))
    got, want = eager.compile(step)(x, w, t), step(x, w, t)
    assert got.dtype is want.dtype is eager.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def _scaler_run(lib, poison_at):
    """Six SGD steps with a GradScaler of growth interval 2; gradients made infinite at
    the steps in `poison_at`: (scales after each update, final weight)."""
    w = lib.nn.Parameter(lib.tensor([1.0, -2.0, 0.5]))
    opt = lib.optim.SGD([w], lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    scales = []
    for i in range(6):
        opt.zero_grad()
        loss = (w * w).sum() * (float("inf") if i in poison_at else 1.0)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, w.detach().numpy().copy(), scaler.state_dict()


def test_grad_scaler_skips_bad_steps_backs_off_and_grows_as_pytorchs():
    torch = require_torch()
    for poison in ((), (1,), (0, 3)):
        theirs, ours = _scaler_run(torch, poison), _scaler_run(eager, poison)
        assert ours[0] == theirs[0], poison
        np.testing.assert_array_equal(ours[1], theirs[1])
        assert ours[2] == theirs[2]


def test_grad_scaler_refuses_what_pytorchs_refuses():
    w = eager.nn.Parameter(eager.ones(2))
    opt = eager.optim.SGD([w], lr=0.1)
    scaler = eager.amp.GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)
    disabled = eager.amp.GradScaler("cpu", enabled=False)
    loss = (w * 2).sum()
    assert disabled.scale(loss) is loss and disabled.get_scale() == 1.0
