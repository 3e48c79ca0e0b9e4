"""Resampling (eager/nn/_sampling.py) against PyTorch: pixel shuffle, interpolate and
grid_sample (values, and gradients to the input and the grid), gradchecked by finite
differences, and their errors."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager import nn
from eager.autograd import gradcheck

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
TF = torch.nn.functional

RNG = np.random.default_rng(30)
TOL = dict(rtol=1e-10, atol=1e-12)


def _both(array, dtype="float64", requires_grad=True):
    return (eager.tensor(array, dtype=getattr(eager, dtype), requires_grad=requires_grad),
            torch.tensor(array, dtype=getattr(torch, dtype), requires_grad=requires_grad))


def _compare(fn, tfn, arrays, tol=TOL):
    """fn on kiln tensors and tfn on torch's: the same values and the same gradients (no
    gradient where PyTorch's is zeros: grid_sample's nearest mode to the grid)."""
    ours, theirs = zip(*(_both(a) for a in arrays))
    out, tout = fn(*ours), tfn(*theirs)
    assert tuple(out.shape) == tuple(tout.shape)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **tol)
    w = RNG.standard_normal(tuple(tout.shape))
    out.backward(eager.tensor(w))
    tout.backward(torch.tensor(w))
    for a, b in zip(ours, theirs):
        if a.grad is None:
            assert not b.grad.any()
            continue
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol)


# pixel shuffle ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, factor", [((1, 8, 3, 2), 2), ((2, 3, 9, 2, 1), 3),
                                           ((4, 2, 2), 1), ((18, 1, 1), 3)])
def test_pixel_shuffle_and_unshuffle_match_pytorch(shape, factor):
    a = RNG.standard_normal(shape)
    _compare(lambda x: F.pixel_shuffle(x, factor), lambda x: TF.pixel_shuffle(x, factor), [a])
    up = TF.pixel_shuffle(torch.tensor(a), factor).numpy()
    _compare(lambda x: nn.PixelUnshuffle(factor)(x),
             lambda x: torch.nn.PixelUnshuffle(factor)(x), [up])
    x = eager.tensor(a)
    assert eager.pixel_shuffle(x, factor).data_ptr() != x.data_ptr()  # a copy, as PyTorch's


@pytest.mark.parametrize("call", [
    lambda lib: lib.nn.functional.pixel_shuffle(lib.ones(4, 2), 2),
    lambda lib: lib.nn.functional.pixel_shuffle(lib.ones(7, 2, 2), 2),
    lambda lib: lib.nn.functional.pixel_shuffle(lib.ones(4, 2, 2), 0),
    lambda lib: lib.nn.functional.pixel_unshuffle(lib.ones(1, 5, 4), 2),
    lambda lib: lib.nn.functional.pixel_unshuffle(lib.ones(1, 4, 5), 2),
    lambda lib: lib.nn.functional.pixel_unshuffle(lib.ones(1, 4, 4), -1)])
def test_pixel_shuffle_errors_are_pytorchs(call):
    with pytest.raises(RuntimeError) as theirs:
        call(torch)
    with pytest.raises(RuntimeError, match=str(theirs.value).replace("(", r"\(").replace(
            ")", r"\)").replace("'", ".")):
        call(eager)


def test_pixel_shuffle_modules_print_as_pytorchs():
    assert repr(nn.PixelShuffle(3)) == repr(torch.nn.PixelShuffle(3))
    assert repr(nn.PixelUnshuffle(2)) == repr(torch.nn.PixelUnshuffle(2))


# interpolate --------------------------------------------------------------------------------
INTERPOLATE = [  # (input shape, keyword arguments)
    ((2, 3, 4, 5), dict(scale_factor=2)),
    ((1, 2, 5, 3), dict(scale_factor=1.5)),
    ((1, 2, 5, 3), dict(scale_factor=(0.5, 2.7))),
    ((1, 2, 5, 7), dict(size=(3, 9))),
    ((1, 2, 4, 4), dict(size=4)),
    ((1, 2, 5, 3), dict(scale_factor=1.7, recompute_scale_factor=True)),
    ((2, 3, 7), dict(scale_factor=3)),
    ((2, 3, 7), dict(size=4)),
    ((1, 2, 3, 4, 2), dict(size=(4, 3, 5))),
    ((1, 1, 1, 4), dict(size=(3, 1))),
]
MODES = {3: ["nearest", "nearest-exact", "linear", "area"],
         4: ["nearest", "nearest-exact", "bilinear", "area"],
         5: ["nearest", "nearest-exact", "trilinear"]}
LINEAR = ("linear", "bilinear", "trilinear")


def _interpolate_cases():
    for shape, kwargs in INTERPOLATE:
        for mode in MODES[len(shape)]:
            corners = [False, True] if mode in LINEAR else [None]
            for align_corners in corners:
                yield pytest.param(shape, dict(kwargs, mode=mode, align_corners=align_corners),
                                   id=f"{shape}-{kwargs}-{mode}-{align_corners}")


@pytest.mark.parametrize("shape, kwargs", _interpolate_cases())
def test_interpolate_matches_pytorch_in_values_and_gradients(shape, kwargs):
    a = RNG.standard_normal(shape)
    _compare(lambda x: F.interpolate(x, **kwargs), lambda x: TF.interpolate(x, **kwargs), [a])


@pytest.mark.parametrize("shape, kwargs", [s for s in _interpolate_cases()
                                           if "area" not in s.id][::3])
def test_interpolate_in_float32_picks_pytorchs_source_pixels(shape, kwargs):
    a = RNG.standard_normal(shape).astype(np.float32)
    got = F.interpolate(eager.tensor(a), **kwargs).numpy()
    want = TF.interpolate(torch.tensor(a), **kwargs).numpy()
    if kwargs["mode"].startswith("nearest"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(scale_factor=1.5, mode="bilinear"),
                                    dict(size=(2, 5), mode="bilinear", align_corners=True),
                                    dict(size=(4, 1), mode="nearest")])
def test_interpolate_passes_gradcheck(kwargs):
    x = eager.tensor(RNG.standard_normal((1, 2, 3, 4)), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, **kwargs), (x,))


def test_upsample_modules_match_pytorch():
    a = RNG.standard_normal((1, 2, 3, 4))
    for ours, theirs in [(nn.Upsample(scale_factor=2, mode="bilinear"),
                          torch.nn.Upsample(scale_factor=2, mode="bilinear")),
                         (nn.UpsamplingNearest2d(size=(5, 7)),
                          torch.nn.UpsamplingNearest2d(size=(5, 7))),
                         (nn.UpsamplingBilinear2d(scale_factor=1.5),
                          torch.nn.UpsamplingBilinear2d(scale_factor=1.5))]:
        assert repr(ours) == repr(theirs)
        _compare(ours, theirs, [a])


@pytest.mark.parametrize("call, error", [
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 2, 2), scale_factor=2,
                                               mode="bilinear"), "Got 3D input, but bilinear"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(2, 2), size=3), "Only 3D, 4D and 5D"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2), size=3, scale_factor=2),
     "only one of size or scale_factor should be defined"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2)),
     "either size or scale_factor should be defined"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2), size=(3,)),
     "must have the same number of spatial dimensions"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2), size=3,
                                               align_corners=True),
     "align_corners option can only be set with the interpolating modes"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2), size=0),
     "Input and output sizes should be greater than 0"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2, 2, dtype=lib.int64), size=3,
                                               mode="bilinear"), "not implemented for 'Long'"),
])
def test_interpolate_refuses_what_pytorch_refuses(call, error):
    with pytest.raises((ValueError, RuntimeError, NotImplementedError)) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value), match=error):
        call(eager)


# grid_sample --------------------------------------------------------------------------------
def _grid(n, h, w, spread=1.2):
    return RNG.uniform(-spread, spread, (n, h, w, 2))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_pytorch_in_values_and_both_gradients(mode, padding_mode,
                                                                 align_corners):
    kwargs = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    image, grid = RNG.standard_normal((2, 3, 4, 5)), _grid(2, 3, 6, spread=2.5)
    _compare(lambda x, g: F.grid_sample(x, g, **kwargs),
             lambda x, g: TF.grid_sample(x, g, **kwargs), [image, grid])


def test_grid_sample_at_pixel_centres_and_the_edges_matches_pytorch():
    """Coordinates landing exactly on pixels and halfway between them (nearest's ties)."""
    image = RNG.standard_normal((1, 2, 3, 4))
    xs = np.linspace(-1.5, 1.5, 13)
    grid = np.stack(np.meshgrid(xs, xs[::2]), -1)[None]
    for mode in ("bilinear", "nearest"):
        for align_corners in (False, True):
            kwargs = dict(mode=mode, align_corners=align_corners)
            np.testing.assert_allclose(
                F.grid_sample(eager.tensor(image), eager.tensor(grid), **kwargs).numpy(),
                TF.grid_sample(torch.tensor(image), torch.tensor(grid), **kwargs).numpy(), **TOL)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_passes_gradcheck(padding_mode):
    image = eager.tensor(RNG.standard_normal((1, 2, 3, 4)), requires_grad=True)
    grid = eager.tensor(_grid(1, 2, 3, spread=1.4), requires_grad=True)
    assert gradcheck(lambda x, g: F.grid_sample(x, g, padding_mode=padding_mode,
                                                align_corners=False), (image, grid))


def test_grid_sample_in_float32_matches_pytorch():
    image, grid = RNG.standard_normal((2, 3, 5, 4)), _grid(2, 4, 4)
    kwargs = dict(align_corners=False)
    got = F.grid_sample(eager.tensor(image, dtype=eager.float32),
                        eager.tensor(grid, dtype=eager.float32), **kwargs)
    want = TF.grid_sample(torch.tensor(image, dtype=torch.float32),
                          torch.tensor(grid, dtype=torch.float32), **kwargs)
    assert got.dtype is eager.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_affine_grid_then_grid_sample_matches_pytorch():
    """The spatial transformer's pair."""
    theta = RNG.standard_normal((2, 2, 3)) * 0.5 + np.array([[1.0, 0, 0], [0, 1.0, 0]])
    image = RNG.standard_normal((2, 3, 5, 4))
    for corners in (False, True):
        _compare(lambda t, x, c=corners: F.grid_sample(x, F.affine_grid(t, [2, 3, 6, 3], c),
                                                       align_corners=c),
                 lambda t, x, c=corners: TF.grid_sample(x, TF.affine_grid(t, [2, 3, 6, 3], c),
                                                        align_corners=c), [theta, image])


def test_grid_sample_without_align_corners_warns_as_pytorch():
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        F.grid_sample(eager.ones(1, 1, 2, 2), eager.zeros(1, 2, 2, 2))


@pytest.mark.parametrize("input_shape, grid_shape, kwargs, error", [
    ((1, 1, 2, 2), (2, 2, 2, 2), {}, "expected grid and input to have same batch size"),
    ((1, 1, 2, 2), (1, 2, 2, 3), {}, "expected grid to have size 2 in last dimension"),
    ((1, 1, 2, 2), (1, 2, 2), {}, "expected 4D input and grid with same number of dimensions"),
    ((1, 1, 0, 2), (1, 2, 2, 2), {}, "expected input to have non-empty spatial dimensions"),
    ((1, 1, 2, 2), (1, 2, 2, 2), {"mode": "foo"}, "expected mode to be 'bilinear', 'nearest'"),
    ((1, 1, 2, 2), (1, 2, 2, 2), {"padding_mode": "foo"}, "expected padding_mode to be"),
])
def test_grid_sample_refuses_what_pytorch_refuses(input_shape, grid_shape, kwargs, error):
    def call(lib):
        return lib.nn.functional.grid_sample(lib.ones(*input_shape), lib.zeros(*grid_shape),
                                             align_corners=False, **kwargs)
    with pytest.raises((ValueError, RuntimeError)) as theirs:
        call(torch)
    with pytest.raises(type(theirs.value), match=error):
        call(eager)
    with pytest.raises(RuntimeError, match="expected input and grid to have the same dtype"):
        F.grid_sample(eager.ones(1, 1, 2, 2), eager.zeros(1, 2, 2, 2, dtype=eager.float64),
                      align_corners=False)
