"""torch._custom_ops, on kiln's dispatcher: `custom_op(qualname, schema)` defines an
operator ("mylib::op", "(Tensor x) -> Tensor"), `impl` registers its CPU (or CUDA)
kernel and `impl_abstract` its Meta kernel (shapes and dtypes, no data); it is called as
`torch.ops.mylib.op(...)` (eager/_ops.py).

`impl` and `impl_abstract` may come before the op is defined, as in PyTorch (torchvision
registers its ops' meta kernels when it is imported, before they exist): the kernel is
kept, and registered when custom_op defines the op. kiln infers no schema from type
annotations, and has no custom autograd rules here (NotSupportedYet naming each)."""
from __future__ import annotations

from eager import _missing, dispatcher

_KEYS = {"cpu": "CPU", "cuda": "CUDA"}
_waiting: dict[str, list] = {}  # qualname -> [(dispatch key, kernel)] until it is defined


def custom_op(qualname: str, func_or_schema=None):
    """Define `qualname` with a schema string "(Tensor x, float s) -> Tensor"."""
    if not isinstance(func_or_schema, str):
        raise _missing.NotSupportedYet(
            f"torch._custom_ops.custom_op({qualname!r}) without a schema string is not "
            f"supported by kiln yet (kiln infers no schema from annotations): pass the "
            f"schema, as in custom_op({qualname!r}, '(Tensor x) -> Tensor')")
    handle = dispatcher.define(f"{qualname}{func_or_schema}")
    for key, kernel in _waiting.pop(handle.name, ()):
        handle.register(key, kernel)


def impl(qualname: str, *, device_types=("cpu", "cuda"), func=None):
    """Register `func` (or the decorated function) as the op's kernel for each device."""
    devices = (device_types,) if isinstance(device_types, str) else tuple(device_types)
    unknown = [d for d in devices if d not in _KEYS]
    if unknown:
        raise ValueError(f"impl({qualname!r}): kiln's devices are cpu and cuda, not "
                         f"{', '.join(unknown)}")
    return _registering(qualname, [_KEYS[d] for d in devices], func)


def impl_abstract(qualname: str, *, func=None):
    """Register `func` (or the decorated function) as the op's Meta kernel."""
    return _registering(qualname, ["Meta"], func)


def _registering(qualname: str, keys: list[str], func):
    def register(fn):
        try:
            handle = dispatcher.find(qualname)
        except KeyError:
            name = qualname if "::" in qualname else f"aten::{qualname}"
            _waiting.setdefault(name, []).extend(
                (dispatcher.DispatchKey[k], fn) for k in keys)
            return fn
        for key in keys:
            dispatcher.impl(handle, key)(fn)
        return fn
    return register if func is None else register(func)


impl_save_for_backward = _missing.not_supported("torch._custom_ops", "impl_save_for_backward")
impl_backward = _missing.not_supported("torch._custom_ops", "impl_backward")
get_ctx = _missing.not_supported("torch._custom_ops", "get_ctx")
