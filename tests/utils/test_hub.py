"""torch.hub and torch.utils.model_zoo without a network: models from a directory with a
hubconf.py (or the repo's copy already in the hub directory), weights already in the
hub's checkpoints; anything that would download raises a ConnectionError naming what and
where."""
import importlib
import os

import numpy as np
import pytest

import eager
from eager import hub
from eager.alias import torch_is_eager

HUBCONF = '''
"""A hubconf.py as a model repo has one."""
import eager
dependencies = ["numpy"]


def tiny(width=2, bias=True):
    """A one-layer model."""
    return eager.nn.Linear(width, 1, bias=bias)


def _private():
    pass
'''


@pytest.fixture
def hub_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "_hub_dir", None)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "hub"


def test_get_dir_follows_torch_home_and_xdg_cache_home_as_pytorchs(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    monkeypatch.setattr(hub, "_hub_dir", None)
    for env in ({"TORCH_HOME": str(tmp_path / "t")}, {"XDG_CACHE_HOME": str(tmp_path / "x")},
                {}):
        for name in ("TORCH_HOME", "XDG_CACHE_HOME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert hub.get_dir() == torch.hub.get_dir()
        assert hub._get_torch_home() == torch.hub._get_torch_home()
    hub.set_dir(tmp_path / "mine")
    assert hub.get_dir() == str(tmp_path / "mine")


def test_load_from_a_local_directory_calls_the_hubconf_entrypoint(tmp_path, hub_dir):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "hubconf.py").write_text(HUBCONF)
    model = hub.load(str(tmp_path / "repo"), "tiny", 3, source="local", bias=False)
    assert isinstance(model, eager.nn.Linear) and model.weight.shape == (1, 3)
    assert model.bias is None and str(tmp_path / "repo") not in __import__("sys").path
    with pytest.raises(RuntimeError, match="Cannot find callable nothing in hubconf"):
        hub.load(str(tmp_path / "repo"), "nothing", source="local")
    (tmp_path / "repo" / "hubconf.py").write_text(HUBCONF.replace('["numpy"]',
                                                                  '["numpy", "no_such_pkg"]'))
    with pytest.raises(RuntimeError, match="Missing dependencies: no_such_pkg"):
        hub.load(str(tmp_path / "repo"), "tiny", source="local")
    with pytest.raises(ValueError, match='Unknown source: "svn"'):
        hub.load(str(tmp_path / "repo"), "tiny", source="svn")


def test_a_github_repo_loads_from_its_copy_in_the_hub_dir_and_else_is_no_download(hub_dir):
    with pytest.raises(ConnectionError, match=r"'owner/repo' is not in the hub directory .*"
                                              r"kiln downloads nothing .*owner_repo_<branch>"):
        hub.load("owner/repo", "tiny")
    (hub_dir / "owner_repo_master").mkdir(parents=True)
    (hub_dir / "owner_repo_master" / "hubconf.py").write_text(HUBCONF)
    assert hub.load("owner/repo", "tiny").weight.shape == (1, 2)  # main absent: master
    assert hub.list("owner/repo") == ["tiny"]
    assert hub.help("owner/repo:master", "tiny") == "A one-layer model."
    with pytest.raises(ConnectionError, match="force_reload asks to fetch it again"):
        hub.load("owner/repo", "tiny", force_reload=True)
    with pytest.raises(ConnectionError, match="'owner/repo:v2' is not in the hub directory"):
        hub.load("owner/repo:v2", "tiny")


def test_load_state_dict_from_url_reads_the_file_already_in_the_hub_checkpoints(hub_dir):
    state = eager.nn.Linear(2, 1).state_dict()
    (hub_dir / "checkpoints").mkdir(parents=True)
    eager.save(state, hub_dir / "checkpoints" / "tiny-1a2b3c.pth")
    url = "https://download.example.org/models/tiny-1a2b3c.pth?raw=1"
    with torch_is_eager():
        from torch.utils import model_zoo
        import torch
        for loaded in (torch.hub.load_state_dict_from_url(url, check_hash=True),
                       model_zoo.load_url(url), torch.hub.load_state_dict_from_url(
                           "https://elsewhere/x.pth", file_name="tiny-1a2b3c.pth")):
            assert list(loaded) == ["weight", "bias"]
            np.testing.assert_array_equal(loaded["weight"].numpy(), state["weight"].numpy())
        assert model_zoo.load_url is torch.hub.load_state_dict_from_url


def test_anything_that_would_download_is_a_connection_error_naming_what_and_where(hub_dir,
                                                                                 tmp_path):
    url = "https://download.example.org/models/big.pth"
    expected = os.path.join(hub_dir, "checkpoints", "big.pth")
    with pytest.raises(ConnectionError, match=f"{url}.*{expected} is not there, and kiln "
                                              f"downloads nothing"):
        hub.load_state_dict_from_url(url)
    with pytest.raises(OSError, match=f"download_url_to_file.*{url}.*kiln downloads nothing"):
        hub.download_url_to_file(url, str(tmp_path / "big.pth"))
    assert not (tmp_path / "big.pth").exists()


def test_torch_hub_and_model_zoo_are_there_under_the_alias_without_importing_them():
    with torch_is_eager():
        import torch
        assert torch.hub is hub and importlib.import_module("torch.hub") is hub
        assert importlib.import_module("torch.utils.model_zoo").load_url is \
            hub.load_state_dict_from_url


def test_tqdm_is_tqdms_where_installed_and_the_stand_in_counts_otherwise(capsys):
    from eager.utils import model_zoo
    assert model_zoo.tqdm is hub.tqdm
    try:
        from tqdm import tqdm
        assert hub.tqdm is tqdm
    except ImportError:
        assert hub.tqdm is hub._Faketqdm
    with hub._Faketqdm(total=4) as bar:
        bar.update(1)
    assert capsys.readouterr().err == "\r25.0%\n"


def test_hash_regex_and_urlparse_are_pytorchs():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    assert hub.HASH_REGEX.pattern == torch.hub.HASH_REGEX.pattern
    assert hub.HASH_REGEX.search("resnet18-f37072fd.pth").group(1) == "f37072fd"
    assert hub.urlparse is torch.hub.urlparse
