"""torch._dynamo, as far as libraries reach into it when no compiler runs: kiln's compiler
(eager.compile) is not TorchDynamo, so `is_compiling` is kiln's own and every other name
is NotSupportedYet (eager/_missing.py)."""
from eager import _missing
from eager.compiler import is_compiling

__all__ = ["is_compiling"]

__getattr__ = _missing.module_getattr("torch._dynamo", "eager._dynamo")
