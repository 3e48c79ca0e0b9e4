"""nn.Module with PyTorch's behaviour: attributes register parameters, buffers and
submodules; state_dict / load_state_dict; train / eval; hooks; a nested repr."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

from eager.autograd.grad_mode import no_grad
from eager.nn.parameter import Buffer, Parameter
from eager.tensor import Tensor, whole_step
from ir import dtypes
from ir.dtypes import DType


def zero_grads(params, set_to_none: bool = True) -> None:
    """Forget (or zero in place) the gradients of `params`: what Module.zero_grad and
    Optimizer.zero_grad do."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            p.grad = p.grad.detach()
            p.grad.zero_()


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict returns: `missing, unexpected = m.load_state_dict(...)`."""
    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class _HookHandle:
    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)


class Module:
    training: bool
    _next_hook_id = 0

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())

    # registration -----------------------------------------------------------------
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError("cannot assign to a Module before Module.__init__() call")
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, Parameter):
            for store in (d, buffers, modules):
                store.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            for store in (d, params, buffers):
                store.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(nn.Parameter or None expected)")
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (nn.Module or None expected)")
            modules[name] = None
        elif isinstance(value, Buffer) or name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(nn.Buffer, Tensor or None expected)")
            d.pop(name, None)
            persistent = value.persistent if isinstance(value, Buffer) else \
                name not in self._non_persistent
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(eager Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._modules[name] = module

    register_module = add_module

    # traversal --------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def get_submodule(self, target: str) -> Module:
        """The submodule at a dotted path ("encoder.layers.0"); "" is this module."""
        module = self
        for item in target.split(".") if target else []:
            if not hasattr(module, item):
                raise AttributeError(f"{type(module).__name__} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def _member(self, target: str):
        """(module, name, value) of a dotted path to an attribute of a submodule."""
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if not hasattr(module, name):
            raise AttributeError(f"{type(module).__name__} has no attribute `{name}`")
        return module, name, getattr(module, name)

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at a dotted path ("encoder.layers.0.linear1.weight")."""
        _, name, value = self._member(target)
        if not isinstance(value, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return value

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at a dotted path ("bn1.running_mean")."""
        module, name, value = self._member(target)
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return value

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            for name, value in getattr(module, store).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        yield from self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # modes and gradients ----------------------------------------------------------
    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        params = list(self.parameters())
        whole_step(lambda: zero_grads(params, set_to_none),
                   f"{type(self).__name__}.zero_grad(set_to_none={set_to_none})",
                   params if set_to_none else ())

    # calling ----------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            new = hook(self, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            new = hook(self, args, out)
            if new is not None:
                out = new
        return out

    def _add_hook(self, store: dict, hook) -> _HookHandle:
        key = Module._next_hook_id
        Module._next_hook_id += 1
        store[key] = hook
        return _HookHandle(store, key)

    def register_forward_hook(self, hook) -> _HookHandle:
        return self._add_hook(self._forward_hooks, hook)

    def register_forward_pre_hook(self, hook) -> _HookHandle:
        return self._add_hook(self._forward_pre_hooks, hook)

    # state ------------------------------------------------------------------------
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            src = state_dict[key]
            if not isinstance(src, Tensor):
                errors.append(f'While copying the parameter named "{key}", expected eager.Tensor '
                              f"or Tensor-like object from checkpoint but received "
                              f"{type(src).__name__}")
                continue
            if tuple(src.shape) != tuple(target.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape {src.shape} "
                              f"from checkpoint, the shape in current model is {target.shape}.")
                continue
            with no_grad():
                target.copy_(src)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" +
                               "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    # dtype and device -------------------------------------------------------------
    def _apply(self, fn):
        with no_grad():
            for m in self.modules():
                for p in m._parameters.values():
                    if p is not None:
                        new = fn(p)
                        if new is not p:  # the same Parameter object, as PyTorch keeps it:
                            p.data = new  # an optimiser built before .to() still holds it
                            if p.grad is not None:
                                p.grad = fn(p.grad)
                for name, b in m._buffers.items():
                    if b is not None:
                        m._buffers[name] = fn(b)
        return self

    def to(self, *args, dtype=None, device=None):
        """`m.to(dtype)`, `m.to(device)`: floating-point tensors take the dtype, all the device."""
        for a in args:
            if isinstance(a, DType):
                dtype = a
            else:
                device = a
        return self._apply(lambda t: t.to(dtype=dtype if t.is_floating_point() else None,
                                          device=device))

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to(device or "cuda")

    # repr -------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                return main + lines[0] + ")"
            return main + "\n  " + "\n  ".join(lines) + "\n)"
        return main + ")"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) |
                      set(self._modules))

