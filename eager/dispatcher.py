"""The dispatcher: one handle per operator, kernels registered per dispatch key.

A call computes a key set (a bit mask) from its tensor arguments and the thread-local
include/exclude masks, then runs the kernel of the highest-priority key. A kernel may
`redispatch` below its own key (the Autograd kernel does this to reach the backend).
Kernels registered for the alias key CompositeImplicitAutograd fill every backend and
Autograd slot that has no kernel of its own: such ops decompose into other ops.
"""
from __future__ import annotations

import contextlib
import enum
import inspect
import os
import threading
import types

from eager.arguments import refuse_dtype
from ir.dtypes import DType
from ir.ops import TENSORS_ONLY, Op
from ir.schema import FunctionSchema, parse_schema


class DispatchKey(enum.IntEnum):
    """Runtime keys; a higher value is a higher priority. Tracer (graph capture) sits
    below Autograd and below composite decomposition, so captured graphs hold the
    primitive ops (mm, not matmul) and autograd still records its nodes above it."""
    Meta = 0
    CPU = 1
    CUDA = 2
    Tracer = 3
    AutogradMeta = 4
    AutogradCPU = 5
    AutogradCUDA = 6
    AutocastCPU = 7  # autocast's casts (eager/amp), above autograd as in PyTorch; only
    AutocastCUDA = 8  # ever in a thread's include mask, never in a tensor's keys
    # alias keys: registering under one fills several runtime keys
    CompositeImplicitAutograd = 16
    Autograd = 17


BACKEND_KEYS = (DispatchKey.Meta, DispatchKey.CPU, DispatchKey.CUDA)
AUTOGRAD_KEYS = (DispatchKey.AutogradMeta, DispatchKey.AutogradCPU, DispatchKey.AutogradCUDA)
AUTOCAST_KEYS = (DispatchKey.AutocastCPU, DispatchKey.AutocastCUDA)
RUNTIME_KEYS = BACKEND_KEYS + (DispatchKey.Tracer,) + AUTOGRAD_KEYS + AUTOCAST_KEYS
AUTOGRAD_OF = dict(zip(BACKEND_KEYS, AUTOGRAD_KEYS))
BACKEND_MASK = sum(1 << k for k in BACKEND_KEYS)
AUTOGRAD_MASK = sum(1 << k for k in AUTOGRAD_KEYS)
ALL_MASK = sum(1 << k for k in RUNTIME_KEYS)
_ALIAS_TARGETS = {
    DispatchKey.CompositeImplicitAutograd: BACKEND_KEYS + (DispatchKey.Tracer,) + AUTOGRAD_KEYS,
    DispatchKey.Autograd: AUTOGRAD_KEYS,
}


class _LocalState(threading.local):
    """Per-thread dispatch state. `exclude` folds in grad mode: with grad disabled the
    Autograd keys are masked out, so autograd costs nothing under no_grad."""

    def __init__(self):
        self.grad_enabled = True
        self.include = 0
        self.exclude = 0


tls = _LocalState()


@contextlib.contextmanager
def _keys_in(mask: str, keys):
    """Set `keys`' bits in the thread's `mask` ("include" or "exclude") for a while;
    on exit only those bits go back to what they were."""
    bits = sum(1 << DispatchKey(k) for k in keys)
    prev = getattr(tls, mask) & bits
    setattr(tls, mask, getattr(tls, mask) | bits)
    try:
        yield
    finally:
        setattr(tls, mask, (getattr(tls, mask) & ~bits) | prev)


def include_keys(*keys: DispatchKey):
    """Add `keys` to every call's key set on this thread (capture turns on Tracer)."""
    return _keys_in("include", keys)


def key_active(key: DispatchKey) -> bool:
    """Whether `key` joins every call's key set on this thread now (during graph capture,
    Tracer does: code that would read a tensor's values can then choose not to)."""
    return bool((tls.include & ~tls.exclude) & (1 << DispatchKey(key)))


def exclude_keys(*keys: DispatchKey):
    """Remove `keys` from every call's key set on this thread."""
    return _keys_in("exclude", keys)


# Per-key fallbacks: `make(handle) -> kernel` for ops with no kernel of their own for the
# key (the Tracer key's records any primitive op into the graph being captured).
_fallbacks: dict = {}


def register_fallback(key: DispatchKey, make) -> None:
    _fallbacks[DispatchKey(key)] = make
    for handle in set(_handles.values()):
        handle._forget_kernels()


# The profiler installs a callable here while it records; None costs one global lookup.
_recorder = None

# Makes a zero-dim "wrapped number" of a Python number given for a Tensor argument:
# eager/tensor.py, which imports this module, sets it (its wrap_scalar) when it loads.
_wrap_number = None


# Runs a call whose keywords name `out` (PyTorch's out=) for an op without that argument:
# eager/out_argument.py sets it when it loads.
_out_writer = None


def set_out_writer(fn) -> None:
    global _out_writer
    _out_writer = fn


def set_recorder(fn) -> None:
    global _recorder
    _recorder = fn


def set_number_wrapper(fn) -> None:
    global _wrap_number
    _wrap_number = fn


def _where(fn) -> str:
    """`file:line` of a kernel's definition (a wrapper's: of what it wraps, functools.wraps
    naming it), for the dispatch-table dump."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return repr(fn)
    return _site(code.co_filename, code.co_firstlineno)


def _site(filename: str, line: int) -> str:
    """`file:line`, the file relative to the repository when it is inside it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.relpath(filename, root) if filename.startswith(root) else filename
    return f"{path}:{line}"


class OpHandle:
    """A callable operator: `handle(*args, **kwargs)` dispatches one call.

    `entry` is the same call as a plain function (Tensor's methods and operators, and
    `eager.tensor.ops`, are these: a function binds as a method with no Python-level
    `__get__`). For an op whose tensors are its one or two leading arguments (exp, sum,
    add, mm, ...), it finds the kernel in `_fast` by those tensors' keys and the thread's
    masks alone; any other call, and the first call for a set of keys, takes the general
    path (`_dispatch`), so both raise the same errors."""

    def __init__(self, schema: FunctionSchema, namespace: str = "aten", op: Op | None = None):
        self.schema = schema
        self.op = op
        self.name = f"{namespace}::{schema.name}"
        self.qualified_name = f"{namespace}::{schema.qualified_name}"
        # key -> (fn, where): where as given to register, made text when a dump asks
        self._kernels: dict[DispatchKey, tuple] = {}
        self._cache: dict[int, object] = {}
        self._tensor_pos = tuple(i for i, a in enumerate(schema.arguments)
                                 if a.type.is_tensor and not a.kwarg_only)
        self._list_pos = tuple(i for i, a in enumerate(schema.arguments)
                               if a.type.is_tensor_list and not a.kwarg_only)
        self._tensor_kw = tuple(a.name for a in schema.arguments if a.type.base == "Tensor")
        self._required = frozenset(a.name for a in schema.arguments if a.type.is_tensor and
                                   not a.type.optional)  # None is no Tensor for these
        self._mutated = tuple(i for i, a in enumerate(schema.arguments) if a.type.mutable)
        self.devices_may_differ = False  # copy_: its source may be on another device
        # out= is taken for the op (eager/out_argument.py) unless its schema names an out
        self.writes_out = all(a.name != "out" for a in schema.arguments)
        self._leading = self._leading_tensors()
        # a Python number for a Tensor argument is wrapped, unless PyTorch has no Scalar
        # form of the op (atan2(x, 2.0) is a TypeError)
        self.takes_numbers = op not in TENSORS_ONLY
        # (mask << 8 | the leading tensors' keys) -> kernel: the mask chooses the kernel;
        # the keys (runtime keys are bits 0-6) are there because only keys naming one
        # backend are remembered, so a call whose keys are found needs no device check
        self._fast: dict[int, object] = {}
        self.entry = _entry(self)
        self._below_entries: dict[DispatchKey, object] = {}  # see below()

    @property
    def __signature__(self):
        """inspect.signature(handle): the schema's arguments, as PyTorch's ops show them."""
        return self.schema.signature()

    def _leading_tensors(self) -> int:
        """1 or 2 where the op's tensor arguments are exactly its first one or two and
        nothing else adds keys (no Tensor[] argument, no argument written to), else 0."""
        names = tuple(a.name for a in self.schema.arguments)
        if self._list_pos or self._mutated:
            return 0
        for n in (1, 2):
            if self._tensor_pos == tuple(range(n)) and self._tensor_kw == names[:n]:
                return n
        return 0

    def __repr__(self) -> str:
        return f"<OpHandle {self.qualified_name}>"

    def __get__(self, obj, cls=None):
        """Handles double as Tensor methods: `t.exp()` calls `exp(t)`."""
        return self if obj is None else types.MethodType(self, obj)

    # registration -------------------------------------------------------------------
    @property
    def kernels(self) -> dict:
        """{key: (kernel, where registered)}; register() adds to it."""
        return self._kernels

    @kernels.setter
    def kernels(self, table: dict) -> None:
        self._kernels = table
        self._forget_kernels()

    def register(self, key: DispatchKey, fn, where: str | tuple | None = None) -> None:
        """`where`: text, a (file, line) pair, or None for the kernel's definition (made
        text only when a dump asks: ~2 ms of `import eager` otherwise)."""
        self._kernels[DispatchKey(key)] = (fn, where)
        self._forget_kernels()

    def _registered_at(self, key: DispatchKey) -> str:
        fn, where = self._kernels[key]
        if where is None:
            return _where(fn)
        return where if isinstance(where, str) else _site(*where)

    def _forget_kernels(self) -> None:
        """Registrations changed: every mask's kernel is resolved again (the caches are
        cleared, never replaced: `entry` holds `_fast`)."""
        self._cache.clear()
        self._fast.clear()

    def _resolve(self, key: DispatchKey):
        """The kernel that runs for a runtime key, or None to fall through below it."""
        if key in self.kernels:
            return self.kernels[key][0]
        for alias in (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd):
            if alias in self.kernels and key in _ALIAS_TARGETS[alias]:
                return self.kernels[alias][0]
        if key in _fallbacks:
            return _fallbacks[key](self)
        return None

    def _kernel_for(self, mask: int):
        kernel = self._cache.get(mask)
        if kernel is not None:
            return kernel
        m = mask
        while m:
            key = DispatchKey(m.bit_length() - 1)
            kernel = self._resolve(key)
            if kernel is not None:
                break
            m &= ~(1 << key)
        else:
            kernel = self._missing_kernel(mask)
        self._cache[mask] = kernel
        return kernel

    def _missing_kernel(self, mask: int):
        backends = [k.name for k in BACKEND_KEYS if mask >> k & 1]
        have = sorted({k.name for k in self.kernels})
        message = (f"Could not run '{self.name}' with arguments from the "
                   f"'{backends[-1] if backends else 'Undefined'}' backend. "
                   f"'{self.name}' is only available for these backends: [{', '.join(have)}].")

        def missing(*args, **kwargs):
            raise NotImplementedError(message)
        return missing

    # calling ------------------------------------------------------------------------
    def _key_mask(self, args, kwargs):
        """Key bits of the tensor arguments; wraps Python numbers in tensor slots."""
        mask = 0
        given = args, kwargs
        n = len(args)
        for i in self._tensor_pos:
            if i >= n:
                break
            try:
                mask |= args[i]._keys
            except AttributeError:
                if args[i] is not None or self.schema.arguments[i].name in self._required:
                    args = args[:i] + (_wrap_scalar(self, i, args[i]),) + args[i + 1:]
        for i in self._list_pos:
            if i < n:
                for t in args[i]:
                    if t is not None:  # Tensor?[] lists hold Nones
                        mask |= _tensor_keys(self, t)
        if kwargs:
            for name in self._tensor_kw:
                v = kwargs.get(name)
                if v is None and (name not in kwargs or name not in self._required):
                    continue
                if isinstance(v, (list, tuple)):
                    for t in v:
                        if t is not None:
                            mask |= _tensor_keys(self, t)
                elif hasattr(v, "_keys"):
                    mask |= v._keys
                else:
                    kwargs = {**kwargs, name: _wrap_scalar(self, name, v)}
        if not mask & BACKEND_MASK:
            if not _holds_tensor(*given) and not self._empty_list(args):
                raise TypeError(f"{self.schema.name}(): expected at least one Tensor argument")
            mask |= 1 << DispatchKey.CPU  # only wrapped numbers, which live on the CPU
        if mask & BACKEND_MASK & (mask & BACKEND_MASK) - 1 and not self.devices_may_differ:
            mask = _cpu_scalars_join(self, mask, args, kwargs)
        return (mask | tls.include) & ~tls.exclude, args, kwargs

    def _empty_list(self, args: tuple) -> bool:
        """Whether a Tensor[] argument is an empty sequence: the kernel, run on the CPU,
        says what it needs (`cat()` and `stack()` raise PyTorch's errors)."""
        return any(i < len(args) and isinstance(args[i], (tuple, list)) and not args[i]
                   for i in self._list_pos)

    def __call__(self, *args, **kwargs):
        return self.entry(*args, **kwargs)

    def _dispatch(self, args: tuple, kwargs: dict):
        """The general path of a call: the recorder, if a profiler is active, else `call`."""
        if kwargs and "out" in kwargs and self.writes_out:
            return _out_writer(self, args, kwargs)
        if _recorder is not None:
            return _recorder(self, args, kwargs)
        return self.call(args, kwargs)

    def call(self, args: tuple, kwargs: dict):
        """One dispatched call (what a call runs when no profiler records it)."""
        mask, args, kwargs = self._key_mask(args, kwargs)
        out = (self._cache.get(mask) or self._kernel_for(mask))(*args, **kwargs)
        if self._mutated:
            self._bump_mutated(args, kwargs)
        return out

    def _first_sight(self, keys: int, args: tuple, kwargs: dict):
        """A call the fast path has no kernel for: remember the kernel of these leading
        tensors' keys, when they name one backend, then take the general path."""
        self._learn(keys, (keys | tls.include) & ~tls.exclude)
        return self._dispatch(args, kwargs)

    def _learn(self, keys: int, mask: int):
        backends = keys & BACKEND_MASK
        if backends and not backends & (backends - 1):
            self._fast[mask << 8 | keys] = self._kernel_for(mask)

    def _bump_mutated(self, args: tuple, kwargs: dict) -> None:
        for i in self._mutated:
            t = args[i] if i < len(args) else kwargs.get(self.schema.arguments[i].name)
            if t is not None:  # an optional out= argument may be absent
                t._bump()

    def redispatch(self, below: DispatchKey, *args, **kwargs):
        """Run the kernel of the highest key strictly below `below` (below the alias
        key Autograd means below every Autograd key: the backend runs)."""
        return self.below(below)(*args, **kwargs)

    def below(self, key: DispatchKey):
        """`redispatch(key, ...)` as a plain function (an Autograd kernel keeps one)."""
        entry = self._below_entries.get(key)
        if entry is None:
            entry = self._below_entries[key] = _entry_below(self, key)
        return entry

    def _redispatch_general(self, below: DispatchKey, args: tuple, kwargs: dict):
        mask, args, kwargs = self._key_mask(args, kwargs)
        mask &= _BELOW[below]
        return (self._cache.get(mask) or self._kernel_for(mask))(*args, **kwargs)

    def call_key(self, key: DispatchKey, *args, **kwargs):
        """Run the kernel that `key` resolves to, whatever the arguments' keys."""
        return self._kernel_for(1 << key)(*args, **kwargs)

    # introspection ------------------------------------------------------------------
    def dump_registrations(self) -> str:
        lines = [f"name: {self.qualified_name}", f"schema: {self.schema}"]
        for key in sorted(self.kernels, key=lambda k: k.value):
            alias = "[alias]" if key.value >= DispatchKey.CompositeImplicitAutograd else ""
            lines.append(f"{key.name}{alias}: registered at {self._registered_at(key)}")
        return "\n".join(lines) + "\n"

    def dump_table(self) -> str:
        """The computed table: which kernel each runtime key runs, and why."""
        lines = []
        for key in RUNTIME_KEYS:
            if key in self.kernels:
                lines.append(f"{key.name}: registered at {self._registered_at(key)} [kernel]")
                continue
            for alias, kind in ((DispatchKey.Autograd, "autograd kernel"),
                                (DispatchKey.CompositeImplicitAutograd, "math kernel")):
                if alias in self.kernels and key in _ALIAS_TARGETS[alias]:
                    lines.append(f"{key.name}: registered at {self._registered_at(alias)} "
                                 f"[{kind}]")
                    break
            else:
                if key in _fallbacks:
                    lines.append(f"{key.name}: {_where(_fallbacks[key])} [backend fallback]")
                elif key in AUTOGRAD_KEYS or key == DispatchKey.Tracer:
                    lines.append(f"{key.name}: fallthrough")
        return "\n".join(lines) + "\n"


# the keys strictly below a key (below the alias Autograd: below every Autograd key)
_BELOW = {k: (1 << k) - 1 for k in DispatchKey}
_BELOW[DispatchKey.Autograd] = (1 << min(AUTOGRAD_KEYS)) - 1


def _entry(handle: OpHandle):
    """`handle`'s call as a plain function, with the fast path of its leading tensors."""
    fast, first_sight, dispatch = handle._fast, handle._first_sight, handle._dispatch
    writes_out = handle.writes_out
    numbers = _NUMBERS if handle.takes_numbers else frozenset()  # (else dispatch refuses)
    if handle._leading == 2:
        def call(*args, **kwargs):
            try:
                if args[1].__class__ in numbers:  # `x + 1`: the number wrapped, the
                    keys = args[0]._keys          # tensor's keys choose the kernel
                    args = (args[0], _wrap_number(args[1]), *args[2:])
                elif args[0].__class__ in numbers:  # `1 - x`
                    keys = args[1]._keys
                    args = (_wrap_number(args[0]), *args[1:])
                else:
                    keys = args[0]._keys | args[1]._keys
            except (AttributeError, IndexError):  # None, a wrong type, two numbers
                return dispatch(args, kwargs)
            kernel = fast.get(((keys | tls.include) & ~tls.exclude) << 8 | keys)
            if _recorder is not None:
                return dispatch(args, kwargs)
            if kernel is None:
                return first_sight(keys, args, kwargs)
            if kwargs:
                if "out" in kwargs and writes_out:
                    return _out_writer(handle, args, kwargs)
                return kernel(*args, **kwargs)
            return kernel(*args)
    elif handle._leading == 1:
        def call(*args, **kwargs):
            try:
                keys = args[0]._keys
            except (AttributeError, IndexError):
                return dispatch(args, kwargs)
            kernel = fast.get(((keys | tls.include) & ~tls.exclude) << 8 | keys)
            if _recorder is not None:
                return dispatch(args, kwargs)
            if kernel is None:
                return first_sight(keys, args, kwargs)
            if kwargs:
                if "out" in kwargs and writes_out:
                    return _out_writer(handle, args, kwargs)
                return kernel(*args, **kwargs)
            return kernel(*args)
    else:
        def call(*args, **kwargs):
            return dispatch(args, kwargs)
    if any(a.type.base == "ScalarType" for a in handle.schema.arguments):
        call = _refusing_dtypes_without_kernels(handle, call)
    call.__name__ = handle.schema.name
    call.__qualname__ = handle.qualified_name
    call.handle = handle
    return call


def _refusing_dtypes_without_kernels(handle: OpHandle, call):
    """`call`, refusing first a dtype argument that kiln names but has no kernels for
    (bfloat16, uint8, ...: NotSupportedYet naming it and the op). Only the few ops with
    a ScalarType argument (sum, mean, softmax, _to_copy, ...) take this step."""
    where = tuple((i, a.name) for i, a in enumerate(handle.schema.arguments)
                  if a.type.base == "ScalarType")

    def checked(*args, **kwargs):
        for i, name in where:
            dt = args[i] if i < len(args) else kwargs.get(name)
            if dt.__class__ is DType and not dt.has_kernels:
                refuse_dtype(handle.schema.name, dt)
        return call(*args, **kwargs)
    return checked


def _entry_below(handle: OpHandle, below: DispatchKey):
    """`handle.redispatch(below, ...)` as a plain function: the same fast path, its mask
    limited to the keys below `below` (no recorder: a redispatch is not an op call)."""
    fast, learn, general = handle._fast, handle._learn, handle._redispatch_general
    limit, n = _BELOW[below], handle._leading

    def call(*args, **kwargs):
        try:
            keys = args[0]._keys | args[1]._keys if n == 2 else args[0]._keys if n else None
        except (AttributeError, IndexError):
            keys = None
        if keys is None:
            return general(below, args, kwargs)
        mask = (keys | tls.include) & ~tls.exclude & limit
        kernel = fast.get(mask << 8 | keys)
        if kernel is None:
            learn(keys, mask)
            return general(below, args, kwargs)
        return kernel(*args, **kwargs) if kwargs else kernel(*args)
    call.__name__ = f"{handle.schema.name}_below_{below.name}"
    call.__qualname__ = call.__name__
    return call


_NUMBERS = frozenset({float, int, bool})  # Python numbers the fast path wraps itself


def _holds_tensor(args: tuple, kwargs: dict) -> bool:
    for v in list(args) + list(kwargs.values()):
        if any(hasattr(t, "_keys") for t in (v if isinstance(v, (list, tuple)) else [v])):
            return True
    return False


def _tensor_keys(handle: OpHandle, t) -> int:
    try:
        return t._keys
    except AttributeError:
        raise TypeError(f"{handle.schema.name}(): expected a sequence of Tensors, "
                        f"but found an element of type {type(t).__name__}") from None


def _wrap_scalar(handle: OpHandle, where, value):
    if handle.takes_numbers and (isinstance(value, (bool, int, float)) or hasattr(
            value, "dtype") and not hasattr(value, "_keys") and getattr(value, "shape",
                                                                        None) == ()):
        return _wrap_number(value)
    name = handle.schema.arguments[where].name if isinstance(where, int) else where
    raise TypeError(f"{handle.schema.name}(): argument '{name}' must be Tensor, "
                    f"not {type(value).__name__}")


_CPU_BITS = (1 << DispatchKey.CPU) | (1 << DispatchKey.AutogradCPU)


def _cpu_scalars_join(handle, mask: int, args, kwargs) -> int:
    """As in PyTorch, zero-dim CPU tensors may join a CUDA op (its kernel reads them as
    numbers): the mask without the CPU keys. Any other mix of devices raises."""
    if mask & (1 << DispatchKey.CUDA) and not mask & (1 << DispatchKey.Meta) and all(
            t.dim() == 0 for v in (*args, *kwargs.values())
            for t in (v if isinstance(v, (list, tuple)) else [v])
            if hasattr(t, "_keys") and getattr(t, "device", None) is not None
            and t.device.type == "cpu"):
        return mask & ~_CPU_BITS
    raise RuntimeError(_device_mismatch(handle, args, kwargs))


def _device_mismatch(handle, args, kwargs) -> str:
    devices = []
    for v in list(args) + list(kwargs.values()):
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            d = getattr(t, "device", None)
            if hasattr(t, "_keys") and d is not None and str(d) not in devices:
                devices.append(str(d))
    return (f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{' and '.join(devices[:2])}! (while running {handle.name})")


# the registry ----------------------------------------------------------------------
_handles: dict[str, OpHandle] = {}


def _lookup_name(name: str) -> str:
    return name if "::" in name else "aten::" + name


def define(schema: str | FunctionSchema, namespace: str = "aten", op: Op | None = None):
    """Declare an operator; returns its handle. A user defines custom ops here too."""
    if isinstance(schema, str):
        if "::" in schema.split("(")[0]:
            namespace, _, schema = schema.partition("::")
        schema = parse_schema(schema)
    handle = OpHandle(schema, namespace, op)
    if handle.qualified_name in _handles:
        raise RuntimeError(f"operator {handle.qualified_name} is already defined")
    _handles[handle.qualified_name] = handle
    _handles.setdefault(handle.name, handle)
    return handle


def undefine(name: str) -> None:
    """Remove a user-defined operator (a test's, or a notebook cell run again)."""
    handle = find(name)
    if handle.op is not None:
        raise RuntimeError(f"{handle.qualified_name} is a built-in operator and stays defined")
    for key in (handle.qualified_name, handle.name):
        if _handles.get(key) is handle:
            del _handles[key]


def find(name: str) -> OpHandle:
    """The handle for `aten::mm`, `mm`, `max.dim` or `mylib::foo`."""
    try:
        return _handles[_lookup_name(name)]
    except KeyError:
        raise KeyError(f"no operator named {name!r} is defined") from None


class OpNamespace:
    """`ops.mylib`: one namespace's operators by name, `ops.mylib.foo(x)` (PyTorch's
    torch.ops.<namespace>); `ops.mylib.foo.default` and `ops.aten.add.Tensor` are the
    overloads' handles."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"eager.ops.{self.name}"

    def __getattr__(self, op: str) -> OpPacket:
        try:
            return OpPacket(find(f"{self.name}::{op}"))
        except KeyError:
            raise AttributeError(f"'_OpNamespace' '{self.name}' object has no attribute "
                                 f"'{op}'") from None


class OpPacket:
    """An operator with its overloads: called, the default one runs."""

    def __init__(self, handle: OpHandle):
        self._handle = handle
        self.__name__ = handle.schema.name

    def __repr__(self) -> str:
        return self._handle.name.replace("::", ".")

    def __call__(self, *args, **kwargs):
        return self._handle(*args, **kwargs)

    def __getattr__(self, overload: str) -> OpHandle:
        if overload == "default":
            return self._handle
        try:
            return find(f"{self._handle.name}.{overload}")
        except KeyError:
            raise AttributeError(f"The underlying op of '{self}' has no overload name "
                                 f"'{overload}'") from None


def impl(name: str | Op | OpHandle, key: DispatchKey | str):
    """Decorator registering a kernel: `@impl("mm", "CPU") def mm_cpu(self, mat2): ...`"""
    if isinstance(key, str):
        if key not in DispatchKey.__members__:
            raise ValueError(f"unknown dispatch key {key!r}; the keys are "
                             f"{', '.join(DispatchKey.__members__)}")
        key = DispatchKey[key]
    if isinstance(name, Op):
        handle = ATEN[name]
    elif isinstance(name, OpHandle):
        handle = name
    else:
        handle = find(name)
    def register(fn):
        handle.register(key, fn)
        return fn
    return register


ATEN: dict[Op, OpHandle] = {op: define(op.schema, "aten", op) for op in Op}
