"""The Optimizer base: parameter groups, per-parameter state, zero_grad and state_dict in
PyTorch's format ({'state': {index: {...}}, 'param_groups': [{..., 'params': [index]}]}).

A step updates a group's parameters in one fused native call (eager/backends/native/optim.py,
loaded on the first step) unless the group says foreach=False; the parameters the
fused kernel cannot take (see `fusable`), and every one where the compiler cannot load,
take the per-tensor `_update`.

zero_grad and step are whole steps (eager.tensor.whole_step): under compile() they run
eagerly, as they are, and a compiled training step replays them around its graph."""
from __future__ import annotations

import copy
from collections import defaultdict

from eager.autograd.grad_mode import enable_grad, no_grad
from eager.nn.modules.module import zero_grads
from eager.tensor import Tensor, whole_step


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)  # as PyTorch's: state[p] is {} until used
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):  # iterating would optimise its rows, not the tensor
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        params = [p for group in self.param_groups for p in group["params"]]
        whole_step(lambda: zero_grads(params, set_to_none),
                   f"{type(self).__name__}.zero_grad(set_to_none={set_to_none})",
                   params if set_to_none else ())

    def step(self, closure=None):
        if closure is not None:  # it runs the model: not a step to replay as it is
            return self._step(closure)
        return whole_step(self._step, f"{type(self).__name__}.step()")

    def _step(self, closure=None):
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if group.get("foreach") is not False and _fused_kernels() is not None:
                    params = self._fused_step(group, params)
                for p in params:
                    state = self.state.get(p, {})
                    self._update(p, p.grad, group, state)
                    if state:  # plain SGD keeps none, and lists none, as PyTorch
                        self.state[p] = state
        return loss

    def _fused_step(self, group: dict, params: list) -> list:
        """Update what one fused kernel per dtype can of `params`; returns the rest."""
        return params

    def _run_fused(self, spec_of, group: dict, params: list, prepare) -> list:
        """The fused step of `params`, one kernel call per dtype: `spec_of(dtype name)`
        gives the kernel's UpdateSpec fields, `prepare(p, state)` the state tensors (made on the
        first step) and the parameter's own scalars. Returns the parameters left over."""
        left, by_dtype = [], {}
        for p in params:
            if fusable(p, p._grad) and all([fusable(t, p) for t in self.state.get(p, {}).values()
                                            if isinstance(t, Tensor)]):
                by_dtype.setdefault(p.dtype.name, []).append(p)
            else:
                left.append(p)
        kernels = _fused_kernels()
        for dtype, members in by_dtype.items():
            spec = kernels.UpdateSpec(**spec_of(dtype))
            tensors, own = [], []
            for p in members:
                state = self.state[p]
                stateful, scalars = prepare(p, state)
                if not state:  # plain SGD keeps none, and lists none, as PyTorch
                    del self.state[p]
                tensors.append([t._np() for t in (p, p.grad, *stateful)])
                own.append(scalars)
                for t in (p, *stateful):
                    t._bump()
            kernels.step(spec, self._group_scalars(group), tensors, own)
        return left

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError

    def _group_scalars(self, group: dict) -> tuple:
        raise NotImplementedError

    # state ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        index, groups = {}, []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {index[id(p)]: {k: (v.clone() if isinstance(v, Tensor) else v)
                                for k, v in s.items()}
                 for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, saved in zip(self.param_groups, groups):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        by_index = {}
        for mine, saved in zip(self.param_groups, groups):
            for p, i in zip(mine["params"], saved["params"]):
                by_index[i] = p
            mine.update({k: copy.deepcopy(v) for k, v in saved.items() if k != "params"})
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            p = by_index[int(i)]
            self.state[p] = {k: (v.clone().to(dtype=p.dtype if v.is_floating_point() else None,
                                                  device=p.device) if isinstance(v, Tensor)
                                 else v) for k, v in s.items()}

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(k for k in group if k != "params"):
                lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


def fusable(t: Tensor, like: Tensor) -> bool:
    """Whether a fused kernel can update `t` beside parameter `like`: float32 or float64
    memory of the CPU, contiguous, of like's shape and dtype. (Read at every step for
    every parameter, its gradient and state: the cheapest tests first.)"""
    dtype = t.dtype
    return (dtype is like.dtype and t._shape == like._shape and dtype.name in _FUSED_DTYPES
            and t.device.type == "cpu" and t._storage.data is not None and t.is_contiguous())


_FUSED_DTYPES = ("float32", "float64")


_kernels = []


def _fused_kernels():
    """eager.backends.native.optim, loaded on first use; None where it cannot load (no
    llvmlite): steps then take the per-tensor path."""
    if not _kernels:
        try:
            from eager.backends.native import optim as fused_optim
        except ImportError:
            fused_optim = None
        _kernels.append(fused_optim)
    return _kernels[0]

