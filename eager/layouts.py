"""Layouts, PyTorch's `torch.layout` values: how a tensor's elements are stored. kiln's
tensors are all dense and strided (`Tensor.layout` is `strided`); the sparse and nested
layouts are named, as libraries compare with them (safetensors refuses a tensor whose
layout is not strided)."""
from __future__ import annotations


class layout:  # noqa: N801 - PyTorch's name
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"eager.{self.name}"

    def __reduce__(self):  # one object per layout, copied or pickled
        return (_named, (self.name,))


def _named(name: str) -> layout:
    return globals()[name]


strided = layout("strided")
sparse_coo = layout("sparse_coo")
sparse_csr = layout("sparse_csr")
sparse_csc = layout("sparse_csc")
sparse_bsr = layout("sparse_bsr")
sparse_bsc = layout("sparse_bsc")
jagged = layout("jagged")
_mkldnn = layout("_mkldnn")

__all__ = ["layout", "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
           "sparse_bsc", "jagged"]
