"""Reverse-mode automatic differentiation: backward nodes, the engine, grad mode, the
derivative table and gradcheck."""
from eager import _missing
from eager.autograd import graph as graph
from eager.autograd import kernels as _kernels  # noqa: F401 - registers the Autograd kernels
from eager.autograd.engine import backward, grad
from eager.autograd.custom_function import Function, FunctionCtx, once_differentiable
from eager.autograd.function import AccumulateGrad, Node
from eager.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                                      set_grad_enabled)
from eager.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "inference_mode", "gradcheck", "gradgradcheck", "Node", "AccumulateGrad", "Function",
           "FunctionCtx", "once_differentiable"]

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.autograd", "eager.autograd")
