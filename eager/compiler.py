"""torch.compiler: `is_compiling()` is True while kiln's compiler captures a function
(eager.compile runs it on tracer tensors, the Tracer dispatch key on), so code can leave
out what should not be captured (a print, a value check); `compile` is eager.compile."""
from eager import _missing, dispatcher
from eager.dispatcher import DispatchKey


def is_compiling() -> bool:
    return dispatcher.key_active(DispatchKey.Tracer)


is_dynamo_compiling = is_compiling


# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.compiler", "eager.compiler")
