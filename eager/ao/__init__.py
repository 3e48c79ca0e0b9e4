"""torch.ao: `quantization`, so that code naming it loads (kiln does not quantize)."""
from eager import _missing
from eager.ao import quantization as quantization

__getattr__ = _missing.module_getattr("torch.ao", "eager.ao")
