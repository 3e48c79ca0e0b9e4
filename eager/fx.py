"""torch.fx, so that code naming it loads: kiln captures graphs its own way (eager.compile
builds its IR by running the function), and has no FX graphs. `wrap(fn_or_name)`, which
only marks a function for FX's tracer, returns its argument; `symbolic_trace` raises
NotSupportedYet naming it."""
from eager import _missing


def wrap(fn_or_name):
    """Marks a function as a leaf for FX's tracer: kiln has none, so its argument."""
    return fn_or_name


symbolic_trace = _missing.not_supported("torch.fx", "symbolic_trace")

# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.fx", "eager.fx")
