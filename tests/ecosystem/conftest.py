"""tests/ecosystem: the libraries' own models on kiln, compared with PyTorch.

Each test runs with `import torch` giving kiln (eager.alias.torch_is_eager), so the
libraries imported there (transformers, timm, torchvision, safetensors) are built on kiln
and stay so for the rest of the process; their PyTorch twins run in a separate process
(ecosystem_reference.py), once per model, and hand over their results as .npz files.

The libraries are the 'ecosystem' extra (pyproject.toml); a test whose library is not
installed is skipped, saying which."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ecosystem_zoo as zoo
from eager.alias import torch_is_eager

HERE = Path(__file__).resolve().parent


@pytest.fixture
def kiln_torch():
    """`torch` is kiln for the test: its library code imports and runs on kiln."""
    with torch_is_eager():
        import torch
        zoo.define_torchvision_operators(torch)
        yield torch


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """reference(model) -> that model's PyTorch results (run once per model)."""
    folder = tmp_path_factory.mktemp("ecosystem-reference")
    done: dict = {}

    def results(name: str) -> dict:
        if name not in done:
            out = folder / f"{name}.npz"
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
            run = subprocess.run([sys.executable, str(HERE / "ecosystem_reference.py"),
                                  str(out), name], capture_output=True, text=True, env=env,
                                 timeout=600)
            if run.returncode != 0:
                raise RuntimeError(f"the PyTorch reference for {name} failed:\n{run.stderr}")
            with np.load(out) as arrays:
                done[name] = zoo.unflatten({k: arrays[k] for k in arrays.files})
        return done[name]
    return results
