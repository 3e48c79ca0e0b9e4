"""torch.onnx.symbolic_opset18: ONNX opset 18's symbolic functions, called only while an
export runs. kiln exports nothing: any of them is a stand-in raising NotSupportedYet,
naming it, when called."""
from eager import _missing


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing.not_supported("torch.onnx.symbolic_opset18", name)
