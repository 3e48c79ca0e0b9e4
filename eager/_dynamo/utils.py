"""torch._dynamo.utils: `is_compile_supported(device)` says whether TorchDynamo can compile
for a device; kiln has no TorchDynamo (its compiler is eager.compile), so never."""
from eager import _missing


def is_compile_supported(device_type) -> bool:
    return False


__getattr__ = _missing.module_getattr("torch._dynamo.utils", "eager._dynamo.utils")
