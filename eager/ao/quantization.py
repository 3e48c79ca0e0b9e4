"""torch.ao.quantization, so that code naming it loads (torchvision's quantizable models
import QuantStub and DeQuantStub): kiln does not quantize.

QuantStub and DeQuantStub are what PyTorch's are until a model is prepared and
converted: identity modules. Each function that prepares, converts, fuses or makes a
qconfig raises NotSupportedYet naming it when called."""
from eager import _missing
from eager.nn.modules.module import Module

_PYTORCH = "torch.ao.quantization"


class QuantStub(Module):
    """Where a quantized model would quantize its input; before `convert`, the identity."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig is not None:
            self.qconfig = qconfig

    def forward(self, x):
        return x


class DeQuantStub(QuantStub):
    """Where a quantized model would dequantize; before `convert`, the identity."""


_FUNCTIONS = ("add_quant_dequant", "convert", "fuse_conv_bn", "fuse_conv_bn_relu",
              "fuse_linear_bn", "fuse_modules", "fuse_modules_qat", "get_default_qat_qconfig",
              "get_default_qconfig", "get_default_qconfig_mapping", "prepare", "prepare_qat",
              "propagate_qconfig_", "quantize", "quantize_dynamic", "quantize_qat",
              "swap_module")
globals().update({name: _missing.not_supported(_PYTORCH, name) for name in _FUNCTIONS})

__all__ = ["DeQuantStub", "QuantStub", *_FUNCTIONS]

# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr(_PYTORCH, "eager.ao.quantization")
