"""torch.onnx, so that code naming it loads: kiln exports no ONNX graphs. Each exporting
function raises NotSupportedYet naming it when called; is_in_onnx_export answers (kiln
is never exporting), as models ask it in their forward. A library registering symbolic
functions for its custom ops at import (torchvision does) has them kept in
`custom_op_symbolics`, for an exporter kiln does not have: registering is bookkeeping.
symbolic_helper.parse_args and the symbolic_opset modules load for those symbolics."""
from eager import _missing
from eager.onnx import symbolic_helper as symbolic_helper

__all__ = ["export", "is_in_onnx_export", "register_custom_op_symbolic",
           "select_model_mode_for_export", "unregister_custom_op_symbolic"]


def is_in_onnx_export() -> bool:
    return False


export = _missing.not_supported("torch.onnx", "export")

# (op name, opset version) -> symbolic function
custom_op_symbolics: dict[tuple[str, int], object] = {}


def register_custom_op_symbolic(symbolic_name: str, symbolic_fn, opset_version: int) -> None:
    """Keep `symbolic_fn` as the ONNX symbolic of `symbolic_name` ("namespace::op") from
    `opset_version` on (PyTorch's checks of the name)."""
    namespace, sep, op = symbolic_name.partition("::")
    if not sep or not namespace or not op or "::" in op:
        raise ValueError(f"Failed to register operator {symbolic_name}. The symbolic name "
                         "must match the format domain::name, and should start with a letter "
                         "and contain only alphanumerical characters")
    if namespace == "onnx":
        raise ValueError(f"Failed to register operator {symbolic_name}. onnx domain is "
                         "reserved for the ONNX standard.")
    custom_op_symbolics[(symbolic_name, opset_version)] = symbolic_fn


def unregister_custom_op_symbolic(symbolic_name: str, opset_version: int) -> None:
    custom_op_symbolics.pop((symbolic_name, opset_version), None)

select_model_mode_for_export = _missing.not_supported("torch.onnx",
                                                      "select_model_mode_for_export")

# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.onnx", "eager.onnx")
