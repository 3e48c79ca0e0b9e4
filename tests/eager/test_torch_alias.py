"""The torch alias (eager/alias.py) stands in for the torch package: every `torch.X.Y`
module name is kiln's `eager.X.Y` module object itself, a name kiln has no module for is
a ModuleNotFoundError naming it, and the `torch` distribution's metadata and
`torch.__version__` report the PyTorch API kiln follows."""
import importlib
import importlib.metadata
import subprocess
import sys

import pytest

import eager
from eager._torch_tensor_names import TORCH_VERSION
from eager.alias import TorchIsEager, torch_is_eager
from eager.torch_version import TorchVersion

FOLLOWED = TORCH_VERSION.partition("+")[0]  # "2.13.0": the PyTorch the name tables are of


def test_every_torch_module_name_is_kilns_module_object_never_a_second_copy():
    with torch_is_eager():
        import torch
        import torch.nn.modules.conv
        import torch.nn.parameter
        import torch.utils.data.dataset
        from torch.nn.modules import module as module_module
        assert torch is eager
        for name in ("torch.nn.modules.conv", "torch.nn.parameter", "torch.utils.data.dataset",
                     "torch.nn.modules.module", "torch.optim.lr_scheduler"):
            kiln_name = "eager" + name[len("torch"):]
            assert importlib.import_module(name) is importlib.import_module(kiln_name)
            assert sys.modules[name] is sys.modules[kiln_name]
            assert sys.modules[name].__spec__.name == kiln_name  # it keeps its own spec
        assert torch.nn.modules.conv.Conv2d is torch.nn.Conv2d is eager.nn.Conv2d
        assert module_module.Module is eager.nn.Module
        assert torch.nn.parameter.Parameter is eager.nn.Parameter
        assert isinstance(eager.nn.Conv2d(1, 1, 1), torch.nn.modules.conv.Conv2d)
        assert torch.utils.data.dataset.Dataset is eager.utils.data.Dataset


def test_a_torch_module_kiln_lacks_is_a_module_not_found_error_naming_it():
    with torch_is_eager():
        with pytest.raises(ModuleNotFoundError, match="No module named 'torch.no_such': kiln "
                                                      "has no torch.no_such yet"):
            importlib.import_module("torch.no_such")
        with pytest.raises(ImportError, match="no_such"):
            from torch.nn.modules import no_such  # noqa: F401
        with pytest.raises(ModuleNotFoundError, match="torch.device is a class, not a module"):
            importlib.import_module("torch.device")
        # the real PyTorch's module of that name was not loaded in its place
        assert "torch.no_such" not in sys.modules and "torch.device" not in sys.modules
        import torch
        assert torch.device is eager.device  # (the class, untouched)


def test_the_finder_is_there_only_inside_the_block_and_the_torch_before_it_comes_back():
    before = sys.modules.get("torch")
    finders = list(sys.meta_path)
    with torch_is_eager():
        assert isinstance(sys.meta_path[0], TorchIsEager)
        import torch
        assert torch is eager
        with torch_is_eager():  # nested: the same, and the outer block's torch after
            import torch.nn.modules.linear  # noqa: F401
        assert sys.modules["torch"] is eager
    assert sys.meta_path == finders and sys.modules.get("torch") is before
    assert not [n for n in sys.modules if n.startswith("torch.") and
                sys.modules[n].__name__.startswith("eager")]


def test_importlib_metadata_and_torch_version_report_the_pytorch_api_kiln_follows():
    with torch_is_eager():
        import torch
        import torch.version
        expected = f"{FOLLOWED}+kiln.0.1.0"
        assert importlib.metadata.version("torch") == torch.__version__ == expected
        assert importlib.metadata.distribution("torch").metadata["Name"] == "torch"
        assert "torch" in importlib.metadata.packages_distributions()
        assert torch.version.__version__ == expected and torch.version.cuda is None
        assert torch.version.hip is None and isinstance(torch.version.git_version, str)
        assert torch.__version__ >= "2.6" and torch.__version__ < (3,)  # as transformers asks
    if importlib.util.find_spec("torch") is not None:  # the real PyTorch's, after
        assert "kiln" not in importlib.metadata.version("torch")


@pytest.mark.parametrize("smaller, larger", [
    ("2.6", "2.13.0+kiln.0.1.0"), ("2.13.0", "2.13.0+kiln.0.1.0"), ("1.10", "2.0"),
    ("2.6.dev0", "2.6a1"), ("2.6a1", "2.6b2"), ("2.6b2", "2.6rc1"), ("2.6rc1", "2.6"),
    ("2.6", "2.6.post1"), ("2.6+cpu", "2.6.post1"), ("2.0.0a0+gitabc", "2.0.0"),
])
def test_torch_version_compares_as_a_version_not_as_text(smaller, larger):
    assert TorchVersion(smaller) < larger and TorchVersion(larger) > smaller
    assert TorchVersion(smaller) <= larger and not TorchVersion(larger) <= smaller
    assert TorchVersion("2.6") == "2.6.0" == TorchVersion("2.6.0") and TorchVersion("2.6") == (2, 6)
    assert TorchVersion("2.6") != "2.6+cpu" and TorchVersion("abc") < "abd"  # text: as text


def test_python_m_eager_alias_runs_a_script_whose_torch_modules_are_kilns(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import importlib.metadata, sys\n"
        "import torch, torch.nn.modules.conv, torch.nn.modules.linear\n"
        "assert torch.nn.modules.conv.Conv2d is torch.nn.Conv2d\n"
        "assert torch.nn.modules.linear.Linear is torch.nn.Linear\n"
        "print(torch.__name__, importlib.metadata.version('torch'), sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-m", "eager.alias", str(script), "--flag"],
                          capture_output=True, text=True, cwd=eager.__path__[0] + "/..")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"eager {FOLLOWED}+kiln.0.1.0 ['--flag']\n"


def test_each_nn_class_is_found_under_the_module_name_pytorch_defines_it_in():
    """For every torch.nn class kiln has (and the private bases isinstance checks name),
    `torch.nn.modules.<file>.<name>` under the alias is kiln's class itself."""
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    from eager.nn.modules import conv, normalization
    public = [name for name in dir(eager.nn) if isinstance(getattr(eager.nn, name, None), type)
              and isinstance(getattr(torch.nn, name, None), type)]
    assert len(public) > 100
    ours = {name: getattr(eager.nn, name) for name in public}
    where = {name: getattr(torch.nn, name).__module__ for name in public}
    for name, module, kiln_class in (
            ("_BatchNorm", "batchnorm", normalization._BatchNorm),
            ("_NormBase", "batchnorm", normalization._NormBase),
            ("_InstanceNorm", "instancenorm", normalization._InstanceNorm),
            ("_ConvNd", "conv", conv._ConvNd)):
        ours[name], where[name] = kiln_class, f"torch.nn.modules.{module}"
        assert hasattr(importlib.import_module(where[name]), name)  # PyTorch's place
    with torch_is_eager():
        wrong = {name: module for name, module in where.items()
                 if getattr(importlib.import_module(module), name, None) is not ours[name]}
    assert wrong == {}


def test_nn_modules_utils_helpers_behave_as_pytorchs():
    pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    from torch.nn.modules import utils as theirs

    from eager.nn.modules import utils as ours
    for name in ("_single", "_pair", "_triple", "_quadruple"):
        for value in (3, (1, 2), [4, 5, 6]):
            assert getattr(ours, name)(value) == getattr(theirs, name)(value)
    assert ours._reverse_repeat_tuple((1, 2, 3), 2) == theirs._reverse_repeat_tuple((1, 2, 3), 2)
    assert ours._list_with_default([None, 5], [1, 2, 3]) == [2, 5]
    import collections
    for lib in (ours, theirs):
        state = collections.OrderedDict([("module.a", 1), ("b", 2), ("module.c", 3)])
        state._metadata = {"": {}, "module": {}, "module.c": {}}
        lib.consume_prefix_in_state_dict_if_present(state, "module.")
        assert list(state.items()) == [("b", 2), ("a", 1), ("c", 3)]
        assert sorted(state._metadata) == ["", "c"]
