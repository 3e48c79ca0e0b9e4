"""torch.hub, without a network: models from a directory holding a hubconf.py, and
weights already in the hub's cache directory.

    load("path/to/dir", "resnet", source="local", ...)   hubconf.py's entrypoint, called
    load("owner/repo[:ref]", "resnet")                   the same, from the repo PyTorch
                                                         would have cloned into get_dir()
    load_state_dict_from_url(url)                        eager.load of the file PyTorch
                                                         would have downloaded into
                                                         get_dir()/checkpoints

kiln downloads nothing: where PyTorch would fetch, a ConnectionError (an OSError, as an
offline PyTorch's failed download is) names what it would fetch and where to put it.
"""
from __future__ import annotations

import builtins
import contextlib
import importlib.util
import os
import re
import sys
import urllib.parse
from urllib.parse import urlparse  # noqa: F401 - torch.hub.urlparse, which timm imports

from eager.serialization import load as _load_file

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load",
           "load_state_dict_from_url", "set_dir"]

# a file name's hash part, `name-<sha256 prefix>.ext` (PyTorch's; timm imports it)
HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")


class _Faketqdm:
    """The progress bar where tqdm is not installed (PyTorch's stand-in: counts, prints
    the percentage to stderr); torchvision imports it as torch.utils.model_zoo.tqdm."""

    def __init__(self, total=None, disable=False, unit=None, *args, **kwargs):
        self.total, self.disable, self.n = total, disable, 0

    def update(self, n) -> None:
        if not self.disable:
            self.n += n
            shown = f"{self.n:.1f} bytes" if self.total is None else \
                f"{100 * self.n / float(self.total):.1f}%"
            sys.stderr.write(f"\r{shown}")
            sys.stderr.flush()

    def set_description(self, *args, **kwargs) -> None:
        pass

    def write(self, s) -> None:
        sys.stderr.write(f"{s}\n")

    def close(self) -> None:
        self.disable = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if not self.disable:
            sys.stderr.write("\n")


try:
    from tqdm import tqdm
except ImportError:
    tqdm = _Faketqdm

_hub_dir: str | None = None


def get_dir() -> str:
    """set_dir's directory, else $TORCH_HOME/hub ($TORCH_HOME defaults to
    $XDG_CACHE_HOME/torch, and that to ~/.cache/torch), as in PyTorch."""
    if _hub_dir is not None:
        return _hub_dir
    return os.path.join(_get_torch_home(), "hub")


def _get_torch_home() -> str:
    """$TORCH_HOME, else $XDG_CACHE_HOME/torch, else ~/.cache/torch (torchvision reads it)."""
    cache = os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache"))
    return os.path.expanduser(os.getenv("TORCH_HOME", os.path.join(cache, "torch")))


def set_dir(d) -> None:
    global _hub_dir
    _hub_dir = os.path.expanduser(os.fspath(d))


def download_url_to_file(url: str, dst: str, hash_prefix: str | None = None,
                         progress: bool = True) -> None:
    raise ConnectionError(f"torch.hub.download_url_to_file({url!r}): kiln downloads nothing "
                          f"(no network access); put the file at {os.fspath(dst)!r} yourself")


def load_state_dict_from_url(url: str, model_dir: str | None = None, map_location=None,
                             progress: bool = True, check_hash: bool = False,
                             file_name: str | None = None, weights_only: bool = False):
    """eager.load of the file already in `model_dir` (get_dir()/checkpoints) under the
    url's file name (PyTorch checks a hash only as it downloads, so neither does this)."""
    model_dir = model_dir or os.path.join(get_dir(), "checkpoints")
    cached = os.path.join(model_dir, file_name or os.path.basename(urllib.parse.urlparse(url).path))
    if not os.path.exists(cached):
        raise ConnectionError(f"load_state_dict_from_url({url!r}): {cached} is not there, and "
                              f"kiln downloads nothing (no network access): put the file there")
    return _load_file(cached, map_location=map_location, weights_only=weights_only)


def load(repo_or_dir: str, model: str, *args, source: str = "github", trust_repo=None,
         force_reload: bool = False, verbose: bool = True, skip_validation: bool = False,
         **kwargs):
    """`model(*args, **kwargs)`, `model` being an entrypoint of the hubconf.py in
    `repo_or_dir` (source="local") or in the GitHub repo's copy in get_dir()."""
    source = source.lower()
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "github":
        repo_or_dir = _cached_repo(repo_or_dir, force_reload)
    with _hubconf(repo_or_dir) as hubconf:
        return _entrypoint(hubconf, model)(*args, **kwargs)


def list(github: str, force_reload: bool = False, skip_validation: bool = False,  # noqa: A001
         trust_repo=None, verbose: bool = True) -> builtins.list[str]:
    """The entrypoints (public callables) of the cached repo's hubconf.py."""
    with _hubconf(_cached_repo(github, force_reload)) as hubconf:
        return [name for name, value in vars(hubconf).items()
                if callable(value) and not name.startswith("_")]


def help(github: str, model: str, force_reload: bool = False,  # noqa: A001
         skip_validation: bool = False, trust_repo=None) -> str | None:
    with _hubconf(_cached_repo(github, force_reload)) as hubconf:
        return _entrypoint(hubconf, model).__doc__


def _cached_repo(github: str, force_reload: bool) -> str:
    """The directory PyTorch clones `owner/repo[:ref]` into (main, else master, when no
    ref is given), where it already is."""
    repo, _, ref = github.partition(":")
    owner, _, name = repo.partition("/")
    for branch in [ref] if ref else ["main", "master"]:
        path = os.path.join(get_dir(), f"{owner}_{name}_{branch.replace('/', '_')}")
        if os.path.isdir(path) and not force_reload:
            return path
    raise ConnectionError(
        f"torch.hub: {github!r} is not in the hub directory {get_dir()}"
        f"{' (force_reload asks to fetch it again)' if force_reload else ''}, and kiln "
        f"downloads nothing (no network access): clone it to "
        f"{os.path.join(get_dir(), f'{owner}_{name}_<branch>')}, or load it from its "
        f"directory with source='local'")


@contextlib.contextmanager
def _hubconf(directory: str):
    """hubconf.py of `directory`, imported with the directory on sys.path meanwhile."""
    path = os.path.join(directory, "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"torch.hub: no hubconf.py in {directory}")
    sys.path.insert(0, directory)
    try:
        spec = importlib.util.spec_from_file_location("hubconf", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(directory)


def _entrypoint(hubconf, model):
    if not isinstance(model, str):
        raise ValueError("Invalid input: model should be a string of function name")
    missing = [package for package in getattr(hubconf, "dependencies", None) or ()
               if importlib.util.find_spec(package) is None]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    entry = getattr(hubconf, model, None)
    if entry is None or not callable(entry):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return entry
