"""Activation checkpointing (torch.utils.checkpoint): run a piece of the forward without
keeping what its backward needs, and run it again in backward to get those values.

`use_reentrant=False` (what PyTorch recommends): the forward records its graph as usual,
but every tensor it saves for backward goes through saved-tensor hooks that keep only
its position; the first unpack in backward runs the function again (grad mode on, the
RNG state of the first run) and hands each node the value saved at the same position.
Gradients reach every tensor the function used, its arguments and what it closes over,
through backward() and autograd.grad alike.

`use_reentrant=True`: one autograd.Function (CheckpointFunction) whose forward runs the
function under no_grad and whose backward runs it again with grad and calls backward on
it: gradients reach the arguments (and, through .grad, what the function closes over).

Under eager.compile a checkpoint is a graph break: it runs eagerly.
"""
from __future__ import annotations

import contextlib
import warnings

from eager.autograd import Function, backward, enable_grad
from eager.autograd.graph import saved_tensors_hooks
from eager.factories import get_rng_state, set_rng_state
from eager.tensor import Tensor, run_eagerly

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


class CheckpointError(RuntimeError):
    """The function, run again in backward, saved other tensors than the first time."""


def checkpoint(function, *args, use_reentrant: bool | None = None, context_fn=None,
               determinism_check: str = "default", debug: bool = False,
               preserve_rng_state: bool = True, **kwargs):
    """`function(*args, **kwargs)`, its activations recomputed in backward."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. use_reentrant=False is recommended; kiln, like PyTorch, "
                      "uses use_reentrant=True when it is not given.", stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if context_fn is not None or determinism_check != "default" or debug:
            raise ValueError("Passing `context_fn` or `debug` or `determinism_check` is only "
                             "supported when use_reentrant=False.")
        return run_eagerly(lambda: CheckpointFunction.apply(function, preserve_rng_state,
                                                            *args),
                           "torch.utils.checkpoint runs eagerly")
    if context_fn is not None:
        raise NotImplementedError("checkpoint(context_fn=...) is not supported by kiln yet")
    return run_eagerly(lambda: _checkpoint_without_reentrant(function, preserve_rng_state,
                                                             args, kwargs),
                       "torch.utils.checkpoint runs eagerly")


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None,
                          **kwargs):
    """Run a Sequential (or a list of modules) in `segments` checkpointed pieces, the last
    one not checkpointed (its activations are needed at once), as PyTorch does."""
    functions = list(functions.children()) if hasattr(functions, "children") else \
        list(functions)
    size = len(functions) // segments

    def run(start: int, end: int):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(functions) - 1)(input)


@contextlib.contextmanager
def _rng_state(state):
    """Run with the RNG as it was (`state`), then put back the RNG as it is now."""
    if state is None:
        yield
        return
    now = get_rng_state()
    set_rng_state(state)
    try:
        yield
    finally:
        set_rng_state(now)


def _detached(args) -> list:
    """The arguments cut from their history, needing grad as they did."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            d = a.detach()
            d.requires_grad_(a.requires_grad)
            a = d
        out.append(a)
    return out


class _Recomputation:
    """One non-reentrant checkpoint: the pack hook keeps positions, the first unpack runs
    the function again and keeps what it saves, in the same order."""

    def __init__(self, function, args, kwargs, rng):
        self.function, self.args, self.kwargs, self.rng = function, args, kwargs, rng
        self.count = 0
        self.values = None

    def pack(self, tensor) -> int:
        self.count += 1
        return self.count - 1

    def unpack(self, position: int):
        if self.values is None:
            self.values = self._recompute()
        return self.values[position]

    def _recompute(self) -> list:
        values = []

        def keep(t):
            values.append(t.detach())

        with _rng_state(self.rng), enable_grad(), saved_tensors_hooks(keep, _unused):
            self.function(*_detached(self.args), **self.kwargs)
        if len(values) != self.count:
            raise CheckpointError(f"torch.utils.checkpoint: a different number of tensors was "
                                  f"saved during the original forward and recomputation.\n"
                                  f"Number of tensors saved during forward: {self.count}\n"
                                  f"Number of tensors saved during recomputation: "
                                  f"{len(values)}")
        return values


def _unused(packed):
    raise CheckpointError("a tensor saved while a checkpoint recomputes was unpacked")


def _checkpoint_without_reentrant(function, preserve_rng_state: bool, args, kwargs):
    frame = _Recomputation(function, args, kwargs,
                           get_rng_state() if preserve_rng_state else None)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        return function(*args, **kwargs)


class CheckpointFunction(Function):
    """The reentrant checkpoint: forward without grad, backward runs it again with grad."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng = get_rng_state() if preserve_rng_state else None
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                          stacklevel=2)
        ctx.others = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        return run_function(*args)

    @staticmethod
    def backward(ctx, *grad_outputs):
        tensors = iter(ctx.saved_tensors)
        inputs = _detached([next(tensors) if o is None else o for o in ctx.others])
        with _rng_state(ctx.rng), enable_grad():
            outputs = ctx.run_function(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)
