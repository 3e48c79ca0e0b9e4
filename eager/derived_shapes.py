"""More ops written in other ops (see eager/derived.py): shape and layout functions,
joins, in-place spellings and tensor constructors of an existing tensor.

    repeat, tile, repeat_interleave   expand, clone, view: always a new tensor, as PyTorch's
                                      (gradients summed back by expand's rule)
    narrow, movedim/moveaxis, swapaxes/swapdims, unflatten, ravel, broadcast_to
    hstack, vstack, dstack, column_stack, concatenate, atleast_1d/2d/3d, meshgrid,
    cartesian_prod
    masked_fill_, tril_, triu_, uniform_, normal_    the out-of-place op copied in (autograd
                                                     records the copy, as PyTorch's in-place op)
    type_as, new_full, new_empty, nelement, ndimension, is_cpu, clip, clamp_min/max, square,
    is_floating_point
"""
from __future__ import annotations

from eager import derived, factories
from eager.composite import copied_as
from eager.arguments import int_arg, int_list
from ir import dtypes
from eager.shapes import wrap_dim
from eager.tensor import Tensor, ops


def _sizes(args) -> list[int]:
    return list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)


def repeat(input: Tensor, *sizes) -> Tensor:
    """The tensor tiled `sizes[i]` times along each dim (leading dims added as needed)."""
    sizes = int_list("repeat", "repeats", _sizes(sizes))
    if len(sizes) < input.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    shape = [1] * (len(sizes) - input.dim()) + list(input.shape)
    spread = input.reshape([d for s in shape for d in (1, s)])
    expanded = ops.expand(spread, [d for r, s in zip(sizes, shape) for d in (r, s)])
    # copied: a reshape would be a view where it can (stride 0 where a dim repeats, of the
    # input itself where none does), refusing an in-place op or writing into the input
    return copied_as(expanded, [r * s for r, s in zip(sizes, shape)])


def tile(input: Tensor, dims) -> Tensor:
    dims = int_list("tile", "dims", dims)
    return repeat(input, [1] * (input.dim() - len(dims)) + list(dims))


def repeat_interleave(input: Tensor, repeats, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element repeated `repeats` times (a number, or one count per element) along
    dim (the flattened tensor without one)."""
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else wrap_dim(dim, x.dim())
    if isinstance(repeats, Tensor) and repeats.numel() != 1:
        counts = repeats.detach().cpu().numpy().reshape(-1).tolist()
        if len(counts) != x.shape[d]:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                               f"repeats.size(0) = {len(counts)} and input.size({d}) = "
                               f"{x.shape[d]}")
        if any(c < 0 for c in counts):
            raise RuntimeError("repeats can not be negative")
        index = [i for i, c in enumerate(counts) for _ in range(c)]
        return ops.index_select(x, d, factories.tensor(index, dtype=dtypes.int64,
                                                       device=x.device))
    count = int(repeats.item() if isinstance(repeats, Tensor) else repeats)
    if count < 0:
        raise RuntimeError("repeats can not be negative")
    shape = list(x.shape)
    spread = ops.unsqueeze(x, d + 1)
    expanded = ops.expand(spread, shape[:d + 1] + [count] + shape[d + 1:])
    return copied_as(expanded, shape[:d] + [shape[d] * count] + shape[d + 1:])


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = wrap_dim(dim, input.dim())
    start = int_arg("narrow", "start", start)
    if start < 0:
        start += input.shape[d]
    if not 0 <= start <= input.shape[d] or length < 0 or start + length > input.shape[d]:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({input.shape[d]}).")
    return ops.slice(input, d, start, start + length)


def movedim(input: Tensor, source, destination) -> Tensor:
    source = [source] if isinstance(source, int) else list(source)
    destination = [destination] if isinstance(destination, int) else list(destination)
    if len(source) != len(destination):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({source} "
                           f"dims) should contain the same number of dims as destination "
                           f"({destination} dims)")
    n = input.dim()
    source = [wrap_dim(s, n) for s in source]
    destination = [wrap_dim(s, n) for s in destination]
    order = [None] * n
    for s, t in zip(source, destination):
        order[t] = s
    rest = iter(d for d in range(n) if d not in source)
    return ops.permute(input, [d if d is not None else next(rest) for d in order])


def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:
    return ops.transpose(input, axis0, axis1)


def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    d = wrap_dim(dim, input.dim())
    return input.reshape(list(input.shape[:d]) + list(sizes) + list(input.shape[d + 1:]))


def ravel(input: Tensor) -> Tensor:
    return input.reshape(-1)


def broadcast_to(input: Tensor, size) -> Tensor:
    return ops.expand(input, list(size))


def atleast_1d(*tensors):
    out = [t.reshape(1) if t.dim() == 0 else t for t in _listed(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors):
    out = [t.reshape(1, -1) if t.dim() < 2 else t for t in _listed(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors):
    def lift(t):
        if t.dim() == 0:
            return t.reshape(1, 1, 1)
        if t.dim() == 1:
            return t.reshape(1, -1, 1)
        return ops.unsqueeze(t, -1) if t.dim() == 2 else t
    out = [lift(t) for t in _listed(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def _listed(tensors) -> list:
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) \
        else list(tensors)


def hstack(tensors) -> Tensor:
    tensors = atleast_1d(*tensors)
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    return ops.cat(tensors, 0 if tensors[0].dim() == 1 else 1)


def vstack(tensors) -> Tensor:
    tensors = atleast_2d(*tensors)
    return ops.cat([tensors] if isinstance(tensors, Tensor) else list(tensors), 0)


def dstack(tensors) -> Tensor:
    tensors = atleast_3d(*tensors)
    return ops.cat([tensors] if isinstance(tensors, Tensor) else list(tensors), 2)


def column_stack(tensors) -> Tensor:
    columns = [t.reshape(-1, 1) if t.dim() <= 1 else t for t in tensors]
    return ops.cat(columns, 1)


def meshgrid(*tensors, indexing: str = "ij"):
    tensors = _listed(tensors)
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        tensors = [tensors[1], tensors[0]] + tensors[2:]
    shape = [t.numel() for t in tensors]
    grids = []
    for i, t in enumerate(tensors):
        view = [1] * len(tensors)
        view[i] = -1
        grids.append(ops.expand(t.reshape(view), shape))
    if swap:  # 'xy': the first two inputs' grids of the swapped 'ij' call, swapped back
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors) -> Tensor:
    tensors = _listed(tensors)
    if len(tensors) == 1:
        return tensors[0]
    return ops.stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


# in place: the op's result copied in ----------------------------------------------------
def masked_fill_(self: Tensor, mask: Tensor, value) -> Tensor:
    return self.copy_(self.masked_fill(mask, value))


def tril_(self: Tensor, diagonal: int = 0) -> Tensor:
    return self.copy_(derived.tril(self, diagonal))


def triu_(self: Tensor, diagonal: int = 0) -> Tensor:
    return self.copy_(derived.triu(self, diagonal))


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator=None) -> Tensor:
    values = factories.rand(*self.shape, dtype=self.dtype, device=self.device,
                            generator=generator)
    return self.copy_(values * (b - a) + a)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    values = factories.randn(*self.shape, dtype=self.dtype, device=self.device,
                             generator=generator)
    return self.copy_(values * std + mean)


# small conveniences ------------------------------------------------------------------
def type_as(self: Tensor, other: Tensor) -> Tensor:
    return self.to(other.dtype)


def new_full(self: Tensor, size, fill_value, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    return factories.full(tuple(size), fill_value, dtype=dtype or self.dtype,
                          device=device or self.device, requires_grad=requires_grad)


def new_empty(self: Tensor, *size, dtype=None, device=None, requires_grad: bool = False):
    return factories.empty(*_sizes(size), dtype=dtype or self.dtype,
                           device=device or self.device, requires_grad=requires_grad)


def is_floating_point(input: Tensor) -> bool:
    return input.dtype.is_floating_point


def is_complex(input: Tensor) -> bool:
    return input.dtype.is_complex


def clip(input: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    return Tensor.clamp(input, min, max)


FUNCTIONS = ["repeat_interleave", "narrow", "movedim", "unflatten", "ravel", "broadcast_to",
             "tile", "clip", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack",
             "dstack", "column_stack", "meshgrid", "cartesian_prod", "is_floating_point",
             "is_complex"]
"""eager.<name>; those taking a tensor first are Tensor methods too."""
__all__ = list(FUNCTIONS)
METHODS = {"repeat": repeat, "tile": tile, "repeat_interleave": repeat_interleave,
           "narrow": narrow, "movedim": movedim, "moveaxis": movedim, "swapaxes": swapaxes,
           "swapdims": swapaxes, "unflatten": unflatten, "ravel": ravel,
           "broadcast_to": broadcast_to, "masked_fill_": masked_fill_, "tril_": tril_,
           "triu_": triu_, "uniform_": uniform_, "normal_": normal_, "type_as": type_as,
           "new_full": new_full, "new_empty": new_empty, "clip": clip, "is_complex": is_complex,
           "clamp_min": lambda self, min: Tensor.clamp(self, min, None),  # noqa: A006
           "clamp_max": lambda self, max: Tensor.clamp(self, None, max),  # noqa: A006
           "square": lambda self: self * self, "nelement": Tensor.numel,
           "ndimension": Tensor.dim}
for _name, _fn in METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.is_cpu = property(lambda self: self.device.type == "cpu")
moveaxis, swapdims, concatenate = movedim, swapaxes, ops.cat
