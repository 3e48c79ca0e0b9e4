"""PyTorch names kiln lacks raise NotImplementedError naming them (eager/_missing.py),
while hasattr() still says no; other unknown names stay plain AttributeErrors; and
docs/MISSING.md is the current list."""
import json
import subprocess
import sys

import pytest

import eager
import eager.nn.functional as F
from eager import _missing
from eager._missing import NotSupportedYet


@pytest.mark.parametrize("get, name", [
    (lambda: eager.linalg, "torch.linalg"),
    (lambda: eager.stft, "torch.stft"),
    (lambda: eager.ones(2).stft, "torch.Tensor.stft"),
    (lambda: eager.nn.Parameter(eager.ones(1)).stft, "torch.Tensor.stft"),
    (lambda: eager.nn.FractionalMaxPool2d, "torch.nn.FractionalMaxPool2d"),
    (lambda: F.conv3d, "torch.nn.functional.conv3d"),
    (lambda: eager.optim.LBFGS, "torch.optim.LBFGS"),
    (lambda: eager.optim.lr_scheduler.CyclicLR, "torch.optim.lr_scheduler.CyclicLR"),
    (lambda: eager.utils.data.IterDataPipe, "torch.utils.data.IterDataPipe"),
])
def test_a_pytorch_name_kiln_lacks_is_not_implemented_naming_it(get, name):
    with pytest.raises(NotImplementedError, match=f"{name} is not supported by kiln yet"):
        get()


def test_probing_still_answers_no_and_unknown_names_are_plain_attribute_errors():
    assert not hasattr(eager, "linalg") and getattr(eager.ones(1), "stft", None) is None
    for get in (lambda: eager.no_such_name, lambda: eager.ones(1).no_such_name,
                lambda: eager.nn.NoSuchLayer, lambda: eager.ones(1)._private):
        with pytest.raises(AttributeError) as caught:
            get()
        assert not isinstance(caught.value, NotSupportedYet)
    with pytest.raises(AttributeError, match="module 'eager' has no attribute 'no_such_name'"):
        eager.no_such_name


def test_docs_missing_md_is_the_current_list():
    with open(_missing.ROOT / "docs" / "MISSING.md") as handle:
        assert handle.read() == _missing.missing_markdown(), \
            "docs/MISSING.md is stale: run `python -m eager._missing --docs-only`"


def test_the_name_lists_are_those_of_the_pytorch_the_tests_compare_with():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    version, names = _missing._torch_version_and_names()
    if torch.__version__ != version:
        pytest.skip(f"PyTorch {torch.__version__} is installed; the lists are {version}'s")
    # in a fresh process, as `python -m eager._missing` reads them: dir(torch) grows as
    # other tests import torch's submodules
    script = ("import json, eager._missing as m, torch; "
              "print(json.dumps(m._torch_names()))")
    listed = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                       text=True, check=True, cwd=_missing.ROOT).stdout)
    assert {ns: frozenset(found) for ns, found in listed.items()} == names


def test_tensor_and_nodes_have_no_getattr_hook():
    """Tensor's lacking names and a node's saved values are class attributes, not a
    `__getattr__`: with one, CPython reads every attribute of the class's instances the
    slow generic way (a tiny op cost ~20% more)."""
    a = eager.ones(2, 2, requires_grad=True)
    node = (a @ a).grad_fn
    for cls in (eager.Tensor, eager.nn.Parameter, type(node)):
        assert not any("__getattr__" in vars(c) for c in cls.__mro__), cls
    assert node.self is not None and node.mat2 is not None  # MmBackward0's saved values


def test_a_lacking_tensor_name_raises_on_the_class_too_and_an_instance_may_set_it():
    with pytest.raises(NotSupportedYet, match="torch.Tensor.stft is not supported"):
        eager.Tensor.stft
    t = eager.ones(2)
    t.stft = "mine"  # an attribute the tensor sets for itself wins over the stand-in
    assert t.stft == "mine" and getattr(eager.ones(2), "stft", None) is None
    assert "stft" in _missing.lacking()["torch.Tensor"]
