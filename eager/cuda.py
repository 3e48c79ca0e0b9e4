"""`eager.cuda`: whether CUDA tensors can be made here."""
from eager.backends import cuda_is_available


def is_available() -> bool:
    return cuda_is_available()


def device_count() -> int:
    from runtime.cuda import device_count as count
    return count() if is_available() else 0
