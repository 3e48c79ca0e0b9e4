"""torch.onnx.symbolic_helper: `parse_args`, the decorator libraries put on their ONNX
symbolic functions at import. It converts a symbolic's arguments while an export runs;
kiln never exports, so it records the descriptors on the function and returns it."""
from eager import _missing


def parse_args(*arg_descriptors: str):
    def decorator(fn):
        fn._onnx_arg_descriptors = arg_descriptors
        return fn
    return decorator


__getattr__ = _missing.module_getattr("torch.onnx.symbolic_helper",
                                      "eager.onnx.symbolic_helper")
