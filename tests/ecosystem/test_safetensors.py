"""safetensors on kiln, through safetensors.torch itself: save_file writes the bytes
PyTorch's tensors would (read back by safetensors' numpy loader, and by PyTorch), load_file
reads files PyTorch wrote, and save_model / load_model move a transformers model's weights
(with GPT-2's tied embedding) in and out of a kiln module."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import ecosystem_zoo as zoo

ARRAYS = {"weight": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
          "ids": np.array([[1, -2], [3, 4]], dtype=np.int64),
          "mask": np.array([True, False, True]), "scale": np.array(0.5, dtype=np.float64),
          "pixels": np.array([0, 7, 255], dtype=np.uint8)}
WRITE_WITH_PYTORCH = """
import sys, numpy as np, torch
from safetensors.torch import save_file
arrays = np.load(sys.argv[1])
save_file({k: torch.from_numpy(arrays[k]) for k in arrays.files}, sys.argv[2],
          metadata={"by": "pytorch"})
"""


def test_save_file_writes_what_safetensors_reads_back(tmp_path, kiln_torch):
    zoo.need("safetensors")
    from safetensors import safe_open
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import save_file
    torch = kiln_torch
    path = tmp_path / "kiln.safetensors"
    save_file({k: torch.from_numpy(a) for k, a in ARRAYS.items()}, str(path),
              metadata={"by": "kiln"})
    loaded = load_numpy(str(path))
    assert loaded.keys() == ARRAYS.keys()
    for key, expected in ARRAYS.items():
        assert loaded[key].dtype == expected.dtype
        np.testing.assert_array_equal(loaded[key], expected)
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"by": "kiln"}


def test_load_file_reads_a_file_pytorch_wrote(tmp_path, kiln_torch):
    zoo.need("safetensors")
    from safetensors.torch import load_file
    np.savez(tmp_path / "arrays.npz", **ARRAYS)
    path = tmp_path / "pytorch.safetensors"
    subprocess.run([sys.executable, "-c", WRITE_WITH_PYTORCH, str(tmp_path / "arrays.npz"),
                    str(path)], check=True)
    loaded = load_file(str(path))
    assert loaded.keys() == ARRAYS.keys()
    for key, expected in ARRAYS.items():
        assert isinstance(loaded[key], kiln_torch.Tensor)
        assert loaded[key].numpy().dtype == expected.dtype
        np.testing.assert_array_equal(loaded[key].numpy(), expected)


def test_save_model_and_load_model_move_a_transformers_model(tmp_path, reference, kiln_torch):
    zoo.need("safetensors", "transformers")
    from safetensors.torch import load_model, save_model
    initial = reference("gpt2")["initial"]
    source, _, _ = zoo.build("gpt2")
    zoo.load_state(source, initial)
    path = tmp_path / "gpt2.safetensors"
    save_model(source, str(path))  # lm_head.weight is wte.weight: saved once
    target, _, _ = zoo.build("gpt2")
    assert not np.array_equal(zoo.state(target)["transformer.wte.weight"],
                              initial["transformer.wte.weight"])
    missing, unexpected = load_model(target, str(path))
    assert (set(missing), list(unexpected)) == (set(), [])
    assert target.lm_head.weight is target.transformer.wte.weight  # still tied
    for key, value in zoo.state(target).items():
        np.testing.assert_array_equal(value, initial[key], err_msg=key)


ROUND_TRIP_WITH_PYTORCH = """
import sys, torch
from safetensors.torch import load_file, save_file
theirs = load_file(sys.argv[1])
assert {k: str(v.dtype) for k, v in theirs.items()} == {
    "bf16": "torch.bfloat16", "i8": "torch.int8", "i16": "torch.int16"}, theirs
save_file({k: v * 2 for k, v in theirs.items()}, sys.argv[2])
print(theirs["bf16"].view(torch.int16).tolist())
"""


def test_bfloat16_int8_and_int16_tensors_go_to_pytorch_and_back(tmp_path, kiln_torch):
    """Most published weights are bfloat16: kiln writes them as safetensors' BF16,
    PyTorch reads the same bits, doubles them and writes them back, kiln reads those."""
    zoo.need("safetensors")
    from safetensors.torch import load_file, save_file
    torch = kiln_torch
    ours = {"bf16": torch.tensor([1.5, -0.3, 3e38, 1e-39], dtype=torch.bfloat16),
            "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
            "i16": torch.tensor([-32768, 5, 32767], dtype=torch.int16)}
    mine, theirs = tmp_path / "kiln.safetensors", tmp_path / "pytorch.safetensors"
    save_file(ours, str(mine))
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP_WITH_PYTORCH, str(mine),
                           str(theirs)], check=True, capture_output=True, text=True)
    assert json.loads(done.stdout) == ours["bf16"].view(torch.int16).tolist()  # the same bits
    back = load_file(str(theirs))
    for key, tensor in ours.items():
        assert back[key].dtype == tensor.dtype
        assert back[key].tolist() == (tensor * 2).tolist(), key
