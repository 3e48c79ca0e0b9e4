"""torch.compiler: `is_compiling()` is True while kiln's compiler captures a function
(eager.compile runs it on tracer tensors, the Tracer dispatch key on), so code can leave
out what should not be captured (a print, a value check); `compile` is eager.compile.
`disable(fn)` makes every call of fn a graph break: it runs eagerly. `allow_in_graph` and
`assume_constant_result` are TorchDynamo's hints; outside Dynamo PyTorch's mark and
return the function, and so do these (kiln's capture does not read them: its result is
the eager result either way)."""
import functools

from eager import _missing, dispatcher
from eager.dispatcher import DispatchKey
from eager.tensor import run_eagerly


def is_compiling() -> bool:
    return dispatcher.key_active(DispatchKey.Tracer)


def disable(fn=None, recursive: bool = True, *, reason: str | None = None):
    """`fn` never compiled: under eager.compile each call of it ends the pending region
    (a graph break explain() lists with `reason`) and runs eagerly. kiln cannot compile
    the functions fn calls while fn itself runs eagerly, so recursive=False (PyTorch's:
    skip fn's own frame only) runs them eagerly too; the result is the same."""
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason)

    @functools.wraps(fn)
    def eagerly(*args, **kwargs):
        why = f"torch.compiler.disable: {reason or fn.__qualname__}"
        return run_eagerly(lambda: fn(*args, **kwargs), why)
    return eagerly


is_dynamo_compiling = is_compiling


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    fn._dynamo_marked_constant = True
    return fn


# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.compiler", "eager.compiler")
