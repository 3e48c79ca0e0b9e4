"""gradcheck: compare autograd's Jacobian with central finite differences (float64)."""
from __future__ import annotations

import numpy as np

from eager.autograd.engine import grad as autograd_grad
from eager.autograd.grad_mode import no_grad


class GradcheckError(RuntimeError):
    pass


def _as_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _differentiable_outputs(fn, inputs):
    from eager.tensor import Tensor
    outs = _as_tuple(fn(*inputs))
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point]


def _numerical(fn, inputs, wrt, eps):
    """Columns d(outputs)/d(input element), stacked per input: list of (n_in, n_out)."""
    jacobians = []
    for t in wrt:
        data = t.detach()._np()
        cols = []
        for idx in np.ndindex(data.shape):
            orig = data[idx].item()
            with no_grad():
                data[idx] = orig + eps
                plus = [o._np().astype(np.float64).ravel() for o in
                        _differentiable_outputs(fn, inputs)]
                data[idx] = orig - eps
                minus = [o._np().astype(np.float64).ravel() for o in
                         _differentiable_outputs(fn, inputs)]
                data[idx] = orig
            cols.append(np.concatenate([(p - m) / (2 * eps) for p, m in zip(plus, minus)])
                        if plus else np.zeros(0))
        jacobians.append(np.array(cols).reshape(data.size, -1))
    return jacobians


def _analytical(fn, inputs, wrt):
    from eager.factories import zeros_like
    outs = _differentiable_outputs(fn, inputs)
    n_out = sum(o.numel() for o in outs)
    jac = [np.zeros((t.numel(), n_out)) for t in wrt]
    col = 0
    for k, o in enumerate(outs):
        if not o.requires_grad:
            col += o.numel()
            continue
        for j in range(o.numel()):
            seed = zeros_like(o)
            seed._np().reshape(-1)[j] = 1
            grads = autograd_grad([o], list(wrt), [seed], retain_graph=True, allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    jac[i][:, col] = g._np().astype(np.float64).ravel()
            col += 1
    return jac


def gradcheck(fn, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """True when every input's analytical Jacobian matches finite differences."""
    inputs = _as_tuple(inputs)
    wrt = [t for t in inputs if getattr(t, "requires_grad", False)]
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    for t in wrt:
        if t.dtype.name != "float64":
            raise ValueError(f"gradcheck needs float64 inputs for accurate finite differences, "
                             f"got {t.dtype}")
    numerical = _numerical(fn, inputs, wrt, eps)
    analytical = _analytical(fn, inputs, wrt)
    for i, (n, a) in enumerate(zip(numerical, analytical)):
        if not np.allclose(a, n, atol=atol, rtol=rtol):
            if not raise_exception:
                return False
            raise GradcheckError(f"Jacobian mismatch for output 0 with respect to input {i},\n"
                                 f"numerical:{n}\nanalytical:{a}\n")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """gradcheck of the gradient itself (second derivatives through create_graph=True)."""
    from eager.factories import randn_like
    inputs = _as_tuple(inputs)
    outs = _differentiable_outputs(fn, inputs)
    if grad_outputs is None:
        grad_outputs = [randn_like(o).requires_grad_() for o in outs]
    grad_outputs = list(_as_tuple(grad_outputs))
    wrt = [t for t in inputs if getattr(t, "requires_grad", False)]
    n_in = len(inputs)

    def first_derivative(*args):
        primals, seeds = args[:n_in], args[n_in:]
        outs = _differentiable_outputs(fn, primals)
        grads = autograd_grad(outs, [t for t in primals if getattr(t, "requires_grad", False)],
                              list(seeds), create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    del wrt
    return gradcheck(first_derivative, tuple(inputs) + tuple(grad_outputs), eps=eps, atol=atol,
                     rtol=rtol, raise_exception=raise_exception)
