"""Shape arithmetic on tuples of ints, no tensors: contiguous strides, the strides a view
needs, a shape with its -1 resolved, dims made non-negative, broadcasting, reduced dims,
each with PyTorch's error text; dims merged for a kernel's addressing (merge_dims). Tensor,
the kernels, composite ops and derivative rules all use it."""
from __future__ import annotations

from eager.arguments import int_arg


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def view_strides(old_shape, old_stride, new_shape):
    """Strides that let `new_shape` view memory laid out as (old_shape, old_stride), or
    None when the sizes cross a gap (PyTorch's computeStride)."""
    if not old_shape:
        return contiguous_strides(new_shape)
    numel = 1
    for s in old_shape:
        numel *= s
    if numel == 0:
        return contiguous_strides(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_stride[-1]
    tensor_numel, view_numel = 1, 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and
                      old_stride[d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base_stride = old_stride[d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new_stride)


def infer_size(shape: tuple[int, ...], numel: int) -> tuple[int, ...]:
    """`shape` (ints) with one -1 resolved, or PyTorch's error when it cannot hold numel."""
    known, infer = 1, None
    for i, s in enumerate(shape):
        if s == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(shape)}")
        else:
            known *= s
    if infer is not None and known == 0 and numel == 0:
        raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} "
                           "because the unspecified dimension size -1 can be any value and is "
                           "ambiguous")
    if infer is not None and known != 0 and numel % known == 0:
        return shape[:infer] + (numel // known,) + shape[infer + 1:]
    if infer is None and known == numel:
        return shape
    raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")


def wrap_dim(dim: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) made non-negative, or IndexError naming the range (and
    TypeError naming a dim that is no int: a float, a bool, None)."""
    if dim.__class__ is not int:
        dim = int_arg("", "dim", dim)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim + n if dim < 0 else dim


def reduce_dims(dim, ndim: int) -> tuple[int, ...]:
    """`dim` (None, an int or a sequence; empty means all) as sorted non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if dim.__class__ is int:
        if 0 <= dim < ndim:  # the common case first
            return (dim,)
        if -ndim <= dim < 0:
            return (dim + ndim,)
        dim = (dim,)
    elif isinstance(dim, int):
        dim = (dim,)
    if len(dim) == 0:
        return tuple(range(ndim))
    dims = tuple(sorted(wrap_dim(d, ndim) for d in dim))
    for a, b in zip(dims, dims[1:]):
        if a == b:
            raise RuntimeError(f"dim {a} appears multiple times in the list of dims")
    return dims if ndim else ()  # a 0-d tensor accepts dim 0 / -1 and has nothing to reduce


def reduced_shape(shape, dims, keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, size in enumerate(s, ndim - len(s)):
            if size == out[i] or size == 1:
                continue
            if out[i] == 1:
                out[i] = size
                continue
            a, b = (out[i], size)
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b "
                               f"({b}) at non-singleton dimension {i}")
    return tuple(out)
