"""torch.onnx, so that code naming it loads: kiln exports no ONNX graphs. Each exporting
function raises NotSupportedYet naming it when called; is_in_onnx_export answers (kiln
is never exporting), as models ask it in their forward."""
from eager import _missing

__all__ = ["export", "is_in_onnx_export", "register_custom_op_symbolic",
           "select_model_mode_for_export", "unregister_custom_op_symbolic"]


def is_in_onnx_export() -> bool:
    return False


export = _missing.not_supported("torch.onnx", "export")
register_custom_op_symbolic = _missing.not_supported("torch.onnx", "register_custom_op_symbolic")
unregister_custom_op_symbolic = _missing.not_supported("torch.onnx",
                                                       "unregister_custom_op_symbolic")
select_model_mode_for_export = _missing.not_supported("torch.onnx",
                                                      "select_model_mode_for_export")

# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.onnx", "eager.onnx")
