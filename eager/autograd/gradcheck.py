"""gradcheck: compare autograd's Jacobians with central finite differences (float64).

Both Jacobians are kept per (input, output) pair, one row per input element and one
column per output element, so a mismatch names the pair it was found in.
"""
from __future__ import annotations

import numpy as np

from eager.autograd.engine import grad as autograd_grad
from eager.factories import tensor, zeros_like
from eager.tensor import Tensor


class GradcheckError(RuntimeError):
    pass


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _requires_grad(x) -> bool:
    return getattr(x, "requires_grad", False)


def _differentiable_outputs(fn, inputs) -> list:
    return [o for o in _as_tuple(fn(*inputs))
            if isinstance(o, Tensor) and o.dtype.is_floating_point]


def _flat_values(outputs) -> list[np.ndarray]:
    return [o.detach()._host_np().astype(np.float64).ravel() for o in outputs]


def _numerical(fn, inputs, wrt, eps) -> list[list[np.ndarray]]:
    """J[i][k][e, :]: d(output k) / d(element e of input i), by central differences.
    Elements are perturbed in the storage itself, which bumps no version counter."""
    sizes = [o.numel() for o in _differentiable_outputs(fn, inputs)]
    jacobians = []
    for t in wrt:
        data = t.detach()._np()
        per_output = [np.zeros((data.size, n)) for n in sizes]
        for e, idx in enumerate(np.ndindex(data.shape)):
            orig = data[idx].item()
            data[idx] = orig + eps
            plus = _flat_values(_differentiable_outputs(fn, inputs))
            data[idx] = orig - eps
            minus = _flat_values(_differentiable_outputs(fn, inputs))
            data[idx] = orig
            for k, (p, m) in enumerate(zip(plus, minus)):
                per_output[k][e] = (p - m) / (2 * eps)
        jacobians.append(per_output)
    return jacobians


def _analytical(fn, inputs, wrt) -> list[list[np.ndarray]]:
    """The same Jacobians from backward: one one-hot grad_output per output element."""
    outputs = _differentiable_outputs(fn, inputs)
    jacobians = [[np.zeros((t.numel(), o.numel())) for o in outputs] for t in wrt]
    for k, o in enumerate(outputs):
        if not o.requires_grad:
            continue
        for j in range(o.numel()):
            seed = zeros_like(o)
            seed._np().reshape(-1)[j] = 1
            grads = autograd_grad([o], list(wrt), [seed], retain_graph=True, allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    jacobians[i][k][:, j] = g.detach()._host_np().astype(np.float64).ravel()
    return jacobians


def gradcheck(fn, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """True when, for every input requiring grad and every floating-point output, the
    analytical Jacobian matches finite differences."""
    inputs = _as_tuple(inputs)
    wrt = [t for t in inputs if _requires_grad(t)]
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    for t in wrt:
        if t.dtype.name != "float64":
            raise ValueError(f"gradcheck needs float64 inputs for accurate finite differences, "
                             f"got {t.dtype}")
    numerical = _numerical(fn, inputs, wrt, eps)
    analytical = _analytical(fn, inputs, wrt)
    for i, (num_i, ana_i) in enumerate(zip(numerical, analytical)):
        for k, (n, a) in enumerate(zip(num_i, ana_i)):
            if not np.allclose(a, n, atol=atol, rtol=rtol):
                if not raise_exception:
                    return False
                raise GradcheckError(f"Jacobian mismatch for output {k} with respect to input "
                                     f"{i},\nnumerical:{n}\nanalytical:{a}\n")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """gradcheck of the gradient itself: differentiates the function that maps (inputs,
    grad_outputs) to the input gradients backward computes with create_graph=True.
    Without `grad_outputs`, fixed pseudo-random ones are used."""
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = [tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype,
                               requires_grad=True)
                        for o in _differentiable_outputs(fn, inputs)]
    grad_outputs = _as_tuple(grad_outputs)
    n_inputs = len(inputs)

    def input_gradients(*args):
        primals, seeds = args[:n_inputs], args[n_inputs:]
        grads = autograd_grad(_differentiable_outputs(fn, primals),
                              [t for t in primals if _requires_grad(t)], list(seeds),
                              create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(input_gradients, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
