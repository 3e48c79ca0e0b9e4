"""CUDA kernels written in other CUDA ops, for ops whose record has no emitter for the
elementwise kernels: gelu_backward (the CPU kernel's formula, one launch per step).
Shapes, dtypes and errors come from the op's Meta kernel."""
from __future__ import annotations

import math

from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.tensor import ops
from compiler.eager_cuda.pointwise import check_dtypes, device_of
from ir.ops import Op


def gelu_backward(grad_output, self, *, approximate="none"):
    shaped = ATEN[Op.GELU_BACKWARD].kernels[DispatchKey.Meta][0](
        grad_output, self, approximate=approximate)
    device_of("gelu_backward", (grad_output, self))
    check_dtypes("gelu_backward", shaped.dtype, grad_output.dtype, self.dtype)
    with exclude_keys(*AUTOGRAD_KEYS):
        g = ops._to_copy(grad_output, dtype=shaped.dtype)
        x = ops._to_copy(self, dtype=shaped.dtype)
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            t = ops.tanh(ops.mul(ops.add(x, ops.mul(ops.mul(ops.mul(x, x), x), 0.044715)), k))
            d_inner = ops.mul(ops.add(ops.mul(ops.mul(x, x), 3 * 0.044715), 1), k)
            slope = ops.mul(ops.mul(ops.mul(x, ops.sub(1, ops.mul(t, t))), d_inner), 0.5)
            return ops.mul(g, ops.add(ops.mul(ops.add(t, 1), 0.5), slope))
        cdf = ops.mul(ops.add(ops.erf(ops.mul(x, 1 / math.sqrt(2.0))), 1), 0.5)
        pdf = ops.mul(ops.exp(ops.mul(ops.mul(x, x), -0.5)), 1 / math.sqrt(2 * math.pi))
        return ops.mul(g, ops.add(cdf, ops.mul(x, pdf)))


KERNELS = {Op.GELU_BACKWARD: gelu_backward}
