"""torch.nn.attention: kiln's scaled_dot_product_attention picks as PyTorch's CPU does (16-bit
floats take its flash kernel's values where PyTorch runs it, else the math path), so
there is no backend to choose; `flex_attention` (compiled block-sparse attention) is
named for the libraries that import it and is NotSupportedYet."""
from eager import _missing

__getattr__ = _missing.module_getattr("torch.nn.attention", "eager.nn.attention")
