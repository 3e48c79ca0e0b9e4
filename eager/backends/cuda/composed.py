"""CUDA kernels written in other CUDA ops, for ops that are not elementwise:
native_layer_norm and native_group_norm and their backward (means, rsqrt and elementwise
ops), _softmax_backward_data and _log_softmax_backward_data (a row sum and elementwise
ops), std, var_mean, std_mean, glu and linalg_vector_norm, each its record's
decomposition run in eager ops (ir/formula.py, EAGER); im2col and col2im (slices, stack,
slice_backward: eager/kernels/windows.py);
isin (eq against chunks of the test values, eager/kernels/membership.py); prod (halves
multiplied, eager/kernels/products.py; not the 16-bit floats, whose products the CPU
rounds one at a time in their own type, in order). Shapes, dtypes and errors
come from the op's Meta kernel.

The ones that compute (not im2col, which moves elements, nor isin, which compares them)
take float16 and bfloat16 widened to float32 and round once at the end (widened.py), as
the CPU's numpy runs them in float32: CUDA ops in the 16-bit type would round at each
op."""
from __future__ import annotations

from functools import partial

from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.kernels.decomposed import EAGER
from eager.kernels.membership import isin_ops
from eager.kernels.products import prod_ops
from eager.kernels.windows import col2im_ops, im2col_ops
from eager.tensor import Tensor
from eager.backends.cuda.pointwise import device_of
from eager.backends.cuda.widened import widened
from ir import dtypes
from ir.ops import Op
from ir.records import RECORDS


def _composed(op: Op, formula):
    """A CUDA kernel of `op` running `formula` in CUDA ops, after the Meta kernel's checks."""
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(*args, **kwargs):
        meta(*args, **kwargs)
        device_of(op.schema.name, [a for a in (*args, *kwargs.values())
                                   if isinstance(a, Tensor)])
        with exclude_keys(*AUTOGRAD_KEYS):
            return formula(*args, **kwargs)
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def _no_half(op: Op, kernel):
    """`kernel`, refusing the 16-bit floats (see the module docstring)."""
    def refusing(self, *args, **kwargs):
        dt = kwargs.get("dtype") or self.dtype
        if dt in dtypes.HALF:
            raise NotImplementedError(
                f"Could not run 'aten::{op.schema.name}' with arguments from the 'CUDA' "
                f"backend: kiln's CUDA kernels have no {dt.name} code for {op.schema.name} "
                f"(it rounds each step in {dt.name}, in order, as the CPU's)")
        return kernel(self, *args, **kwargs)
    refusing.__name__ = kernel.__name__
    return refusing


_DECOMPOSED = (Op.NATIVE_LAYER_NORM, Op.NATIVE_LAYER_NORM_BACKWARD, Op.NATIVE_GROUP_NORM,
               Op.NATIVE_GROUP_NORM_BACKWARD, Op.SOFTMAX_BACKWARD_DATA,
               Op.LOG_SOFTMAX_BACKWARD_DATA, Op.STD, Op.VAR_MEAN, Op.STD_MEAN, Op.GLU,
               Op.LINALG_VECTOR_NORM)
KERNELS = {**{op: widened(op, _composed(op, partial(RECORDS[op].formula, EAGER)))
              for op in _DECOMPOSED},
           Op.IM2COL: _composed(Op.IM2COL, im2col_ops),
           Op.COL2IM: widened(Op.COL2IM, _composed(Op.COL2IM, col2im_ops)),
           Op.ISIN: _composed(Op.ISIN, isin_ops),
           Op.PROD: _no_half(Op.PROD, _composed(Op.PROD, prod_ops))}
