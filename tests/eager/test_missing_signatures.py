"""docs/MISSING.md's sections read from PyTorch's signatures (eager/_missing_signatures.py):
what they list kiln really lacks, what kiln has is not listed, a change to kiln's code
changes them (so tests/eager/test_missing_names.py's check of the doc fails until it is
written again), and the committed snapshot is what PyTorch reports."""
import functools
import importlib
import inspect
import json
import subprocess
import sys

import pytest

import eager
import eager.nn.functional as F
from eager import _missing, _missing_signatures as signatures
from eager._torch_signatures import KEYWORDS, TORCH_VERSION
from eager.alias import torch_is_eager


def _ones():
    return eager.ones(3)


@pytest.mark.parametrize("namespace, name, keyword, call", [
    ("torch", "concatenate", "axis", lambda: eager.concatenate([_ones()], axis=0)),
    ("torch", "cumsum", "out", lambda: eager.cumsum(_ones(), 0, out=eager.empty(3))),
    ("torch", "zeros", "layout", lambda: eager.zeros(2, layout=eager.strided)),
    ("torch.Tensor", "contiguous", "memory_format",
     lambda: _ones().contiguous(memory_format=eager.contiguous_format)),
    ("torch.nn.functional", "mse_loss", "weight", lambda: F.mse_loss(_ones(), _ones(),
                                                                     weight=_ones())),
    ("torch.nn", "Embedding", "sparse", lambda: eager.nn.Embedding(3, 2, sparse=False)),
    ("torch.nn", "Hardtanh", "min_value", lambda: eager.nn.Hardtanh(min_value=-1.0)),
    ("torch.optim", "Adam", "fused",
     lambda: eager.optim.Adam([eager.nn.Parameter(_ones())], fused=False)),
])
def test_a_listed_keyword_argument_is_refused(namespace, name, keyword, call):
    assert keyword in signatures.refused_keywords()[namespace]["refused"][name]
    with pytest.raises(TypeError, match=keyword):
        call()


@pytest.mark.parametrize("namespace, name, keyword, call", [
    ("torch", "add", "alpha", lambda: eager.add(_ones(), _ones(), alpha=2)),
    ("torch", "add", "out", lambda: eager.add(_ones(), _ones(), out=eager.empty(3))),
    ("torch", "div", "rounding_mode", lambda: eager.div(_ones(), 2, rounding_mode="floor")),
    ("torch.Tensor", "div_", "rounding_mode", lambda: _ones().div_(2, rounding_mode="trunc")),
    ("torch", "sum", "keepdim", lambda: eager.sum(_ones(), 0, keepdim=True)),
    ("torch.Tensor", "sum", "dtype", lambda: _ones().sum(dtype=eager.float64)),
    ("torch.nn.functional", "conv2d", "groups",
     lambda: F.conv2d(eager.ones(1, 2, 3, 3), eager.ones(2, 1, 1, 1), groups=2)),
    ("torch.nn", "Linear", "bias", lambda: eager.nn.Linear(2, 2, bias=False)),
    ("torch.nn", "ELU", "alpha", lambda: eager.nn.ELU(alpha=2.0)),  # (*args, **kwargs)
    ("torch.optim", "Adam", "amsgrad",
     lambda: eager.optim.Adam([eager.nn.Parameter(_ones())], amsgrad=True)),
])
def test_a_keyword_argument_kiln_takes_is_not_listed(namespace, name, keyword, call):
    assert keyword in KEYWORDS[namespace][name].split()  # PyTorch takes it
    assert keyword not in signatures.refused_keywords()[namespace]["refused"][name]
    call()


def test_a_keyword_argument_kiln_gains_leaves_the_list(monkeypatch):
    listed = "- `Adam`: `capturable`, `decoupled_weight_decay`, `differentiable`"
    assert f"{listed}, `fused`" in signatures.markdown_sections()
    init = eager.optim.Adam.__init__
    signature = inspect.signature(init)
    fused = inspect.Parameter("fused", inspect.Parameter.KEYWORD_ONLY, default=None)

    def taking_fused(self, *args, fused=None, **kwargs):
        init(self, *args, **kwargs)
    taking_fused.__signature__ = signature.replace(
        parameters=[*signature.parameters.values(), fused])
    monkeypatch.setattr(eager.optim.Adam, "__init__", taking_fused)
    assert listed in signatures.markdown_sections()


def test_a_callable_taking_any_keyword_is_never_listed():
    def anything(*args, **kwargs):
        pass
    assert signatures.kiln_keywords(anything) == {signatures.ACCEPTS_ANY}
    assert signatures.kiln_keywords(eager.add) == {"self", "other", "alpha", "out"}


@pytest.mark.parametrize("parameters, keywords", [
    ("input, other, *, alpha=1, out=None", {"alpha", "out"}),
    ("low=0, high, size, \\*, generator=None", {"low", "generator"}),  # reST's \*
    ("*size, out=None, layout=torch.strided", {"out", "layout"}),
    ("input, kernel_size, stride=(1, 1), padding: int = 0, **kwargs", {"stride", "padding"}),
    ("input (Tensor), dim", None),  # prose, not a signature: nothing is guessed
])
def test_a_docstring_signature_line_gives_its_keyword_arguments(parameters, keywords):
    assert signatures._doc_keywords(parameters) == keywords


def test_every_overload_in_a_docstring_counts_and_the_return_type_is_not_read():
    class Builtin:  # no signature (not even callable): its docstring is read
        __doc__ = ("\nkthvalue(input, k, dim=None, keepdim=False, *, out=None) -> "
                   "(Tensor, LongTensor)\n\n"
                   ".. function:: kthvalue(input, k, *, stable) -> Tensor\n")
    found = signatures.pytorch_keywords("kthvalue", Builtin())
    assert found == {"dim", "keepdim", "out", "stable"}


def test_a_listed_module_method_is_lacking_and_one_kiln_has_is_not_listed():
    lacking = signatures.lacking_module_methods()
    assert "insert" in lacking["Sequential"][0] and not hasattr(eager.nn.Sequential, "insert")
    assert "register_full_backward_hook" in lacking["Module"][0]
    assert "state_dict" not in lacking["Module"][0] and "append" not in lacking["Sequential"][0]


def test_a_torch_utils_submodule_listed_as_missing_does_not_import_through_the_alias():
    submodules = signatures.utils_submodules()
    assert submodules["hooks"] is None and submodules["checkpoint"] is not None
    with torch_is_eager():
        with pytest.raises(ModuleNotFoundError, match="torch.utils.hooks"):
            importlib.import_module("torch.utils.hooks")
        assert importlib.import_module("torch.utils.checkpoint") is eager.utils.checkpoint


def test_the_signature_snapshot_is_that_of_the_pytorch_the_tests_compare_with():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    if torch.__version__ != TORCH_VERSION:
        pytest.skip(f"PyTorch {torch.__version__} is installed; the snapshot is "
                    f"{TORCH_VERSION}'s")
    # in a fresh process, as `python -m eager._missing` reads it (see test_missing_names)
    script = ("import json, eager._missing_signatures as s; "
              "print(json.dumps(s.pytorch_signatures()))")
    found = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                      text=True, check=True, cwd=_missing.ROOT).stdout)
    from eager import _torch_signatures as snapshot
    assert found == {"MODULE_METHODS": snapshot.MODULE_METHODS, "UTILS": snapshot.UTILS,
                     "KEYWORDS": snapshot.KEYWORDS}


def test_a_wrappers_own_keyword_arguments_count_and_its_kwargs_are_what_it_wraps():
    def square(input):
        pass

    @functools.wraps(square)
    def taking_out(*args, out=None, **kwargs):
        pass
    assert signatures.kiln_keywords(taking_out) == {"input", "out"}
    assert "out" not in signatures.refused_keywords()["torch"]["refused"]["square"]
    eager.square(_ones(), out=eager.empty(3))


def test_a_builtin_without_a_docstring_signature_is_read_from_its_aten_schemas_but_out():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    assert signatures.pytorch_keywords("embedding", torch.embedding) == {
        "padding_idx", "scale_grad_by_freq", "sparse"}
    assert signatures.pytorch_keywords("relu", torch.relu) == set()  # it refuses out=
    with pytest.raises(TypeError, match="out"):
        torch.relu(torch.ones(1), out=torch.empty(1))
