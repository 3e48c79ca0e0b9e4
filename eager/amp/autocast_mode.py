"""Autocast (torch.autocast): inside the context, chosen ops run in a lower-precision
float type (bfloat16 on the CPU, float16 on CUDA) and others in float32, by PyTorch's
op lists, so that a float32 model trains in 16 bits where that is safe.

Two dispatch keys do it, AutocastCPU and AutocastCUDA, above autograd: the context puts
its key in the thread's include mask, and each listed op has a kernel for the key that
casts its floating tensor arguments (never float64 ones) and runs the op below autocast,
with autocast off inside it (a matmul inside an fp32 loss stays in float32). The casts
are ordinary _to_copy calls, so autograd records them (ToCopyBackward0: a float32
weight's gradient is float32) and graph capture records them too. Functions that are
not ops (conv2d, the losses) take the same policy through `policy`, a decorator.

Casts of leaf tensors that require grad (weights) are cached for the outermost context,
as PyTorch's cache_enabled does: a weight used ten times is cast once.
"""
from __future__ import annotations

import functools
import threading

from eager.dispatcher import ATEN, DispatchKey, exclude_keys, key_active, tls
from eager.tensor import Tensor
from ir import dtypes

AUTOCAST_KEY = {"cpu": DispatchKey.AutocastCPU, "cuda": DispatchKey.AutocastCUDA}
DEFAULT_DTYPE = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}
SUPPORTED_DTYPES = {"cpu": (dtypes.bfloat16, dtypes.float16),
                    "cuda": (dtypes.float16, dtypes.bfloat16)}

# PyTorch's lists (aten/src/ATen/autocast_mode.cpp), by the names of the ops and
# functions kiln has: "lower" runs in the autocast dtype, "fp32" in float32, "promote"
# in the widest floating type among the arguments
LISTS = {
    "cpu": {
        "lower": ("mm", "bmm", "addmm", "matmul", "linear", "baddbmm", "addbmm", "conv1d",
                  "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d", "prelu", "scaled_dot_product_attention"),
        "fp32": ("binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
                 "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss",
                 "poisson_nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss",
                 "huber_loss", "margin_ranking_loss", "soft_margin_loss",
                 "triplet_margin_loss", "kl_div", "multilabel_soft_margin_loss",
                 "gaussian_nll_loss", "prod", "cdist", "trace", "inverse"),
        "promote": ("cat", "stack", "index_copy"),
    },
    "cuda": {
        "lower": ("mm", "bmm", "addmm", "matmul", "linear", "mv", "baddbmm", "addbmm",
                  "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d", "prelu", "einsum", "scaled_dot_product_attention"),
        "fp32": ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2",
                 "log1p", "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus",
                 "layer_norm", "native_layer_norm", "group_norm", "cosine_similarity",
                 "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
                 "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
                 "huber_loss", "mse_loss", "margin_ranking_loss", "soft_margin_loss",
                 "triplet_margin_loss", "binary_cross_entropy_with_logits",
                 "cross_entropy", "multilabel_soft_margin_loss", "gaussian_nll_loss",
                 "cdist", "logsumexp", "sum", "prod", "cumsum", "cumprod", "softmax",
                 "log_softmax", "norm"),
        "promote": ("addcdiv", "addcmul", "atan2", "cross", "dot", "index_put",
                    "scatter_add", "tensordot", "cat", "stack", "index_copy"),
    },
}


class _State(threading.local):
    """Per thread, as PyTorch's: the dtype each device casts to, the cast cache, and how
    deep the contexts nest (the cache empties when the outermost one exits)."""

    def __init__(self):
        self.dtype = dict(DEFAULT_DTYPE)
        self.cache_enabled = True
        self.depth = 0
        self.cache: dict[int, tuple[Tensor, Tensor]] = {}


state = _State()


def is_enabled(device_type: str) -> bool:
    return key_active(AUTOCAST_KEY[device_type])


def set_enabled(device_type: str, enabled: bool) -> None:
    bit = 1 << AUTOCAST_KEY[device_type]
    tls.include = tls.include | bit if enabled else tls.include & ~bit


def _cast(t, dt):
    """`t` as `dt` if autocast may cast it: a floating tensor, not float64."""
    if not isinstance(t, Tensor) or t.dtype is dt or not t.dtype.is_floating_point or \
            t.dtype is dtypes.float64:
        return t
    cacheable = state.cache_enabled and t.requires_grad and t.grad_fn is None and \
        dt is not dtypes.float32
    if cacheable:
        hit = state.cache.get(id(t))
        if hit is not None and hit[0] is t and hit[1].dtype is dt:
            return hit[1]
    out = t.to(dt)
    if cacheable:
        state.cache[id(t)] = (t, out)
    return out


def _cast_all(value, dt):
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_all(v, dt) for v in value)
    return _cast(value, dt)


def _widest(values, widest=None):
    for v in values:
        if isinstance(v, (list, tuple)):
            widest = _widest(v, widest)
        elif isinstance(v, Tensor) and v.dtype.is_floating_point:
            widest = v.dtype if widest is None else dtypes.promote_types(widest, v.dtype)
    return widest


def _target(kind: str, device_type: str, args, kwargs):
    if kind == "lower":
        return state.dtype[device_type]
    if kind == "fp32":
        return dtypes.float32
    return _widest(list(args) + list(kwargs.values()))


def _run_cast(kind: str, device_type: str, run, args, kwargs):
    """`run(*args, **kwargs)` with the arguments cast for `kind`, autocast off inside."""
    dt = _target(kind, device_type, args, kwargs)
    if dt is not None:
        args = _cast_all(args, dt)
        kwargs = {k: _cast_all(v, dt) for k, v in kwargs.items()}
    with exclude_keys(*AUTOCAST_KEY.values()):
        return run(*args, **kwargs)


def policy(name: str):
    """A decorator giving a function that is not an op (conv2d, cross_entropy) the
    autocast policy PyTorch's lists give its op, under `name`."""
    kinds = {device: next((k for k, names in lists.items() if name in names), None)
             for device, lists in LISTS.items()}

    def wrap(fn):
        @functools.wraps(fn)
        def cast(*args, **kwargs):
            for device, key in AUTOCAST_KEY.items():
                if kinds[device] and key_active(key):
                    return _run_cast(kinds[device], device, fn, args, kwargs)
            return fn(*args, **kwargs)
        return cast
    return wrap


def _register_kernels() -> None:
    """An Autocast kernel for each listed op kiln has."""
    by_name: dict = {}
    for handle in ATEN.values():
        by_name.setdefault(handle.schema.name, []).append(handle)
    for device, lists in LISTS.items():
        key = AUTOCAST_KEY[device]
        for kind, names in lists.items():
            for name in names:
                for handle in by_name.get(name, ()):
                    handle.register(key, _kernel(handle, kind, device, key))


def _kernel(handle, kind: str, device_type: str, key: DispatchKey):
    below = handle.below(key)

    def kernel(*args, **kwargs):
        return _run_cast(kind, device_type, below, args, kwargs)
    kernel.__name__ = f"{handle.schema.name}_autocast_{device_type}"
    return kernel


_register_kernels()
