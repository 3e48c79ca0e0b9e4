"""transformers models in bfloat16 on kiln, against PyTorch in bfloat16: the same float32
weights (PyTorch's initialisation, handed over), the model converted with
`.to(torch.bfloat16)`, then forward; and the float32 model's forward under
`torch.autocast("cpu")`. The logits agree within a few bfloat16 roundings."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ecosystem_zoo as zoo

HERE = Path(__file__).resolve().parent
IDS = (np.arange(16).reshape(2, 8) * 7) % 96
PYTORCH_SIDE = """
import sys, numpy as np, torch
import ecosystem_zoo as zoo
zoo.define_torchvision_operators(torch)
name, out = sys.argv[1], sys.argv[2]
model = zoo.build(name)[0].eval()
ids = torch.from_numpy(np.load(out + ".ids.npy"))
with torch.autocast("cpu"):
    autocast = model(ids).logits
np.savez(out, autocast_dtype=np.array(str(autocast.dtype)),
         autocast=autocast.float().detach().numpy(),
         bf16=model.to(torch.bfloat16)(ids).logits.float().detach().numpy(),
         **{"w." + k: v for k, v in zoo.state(zoo.build(name)[0]).items()})
"""


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_transformers_model_in_bfloat16_gives_pytorchs_logits(name, tmp_path, kiln_torch):
    zoo.need("transformers")
    out = str(tmp_path / name)
    np.save(out + ".ids.npy", IDS)
    subprocess.run([sys.executable, "-c", PYTORCH_SIDE, name, out], check=True,
                   cwd=HERE, env={"PYTHONPATH": str(HERE), "PATH": ""})
    theirs = np.load(out + ".npz")
    torch = kiln_torch
    model = zoo.build(name)[0].eval()
    zoo.load_state(model, {k[2:]: theirs[k] for k in theirs.files if k.startswith("w.")})
    ids = torch.from_numpy(IDS)
    with torch.autocast("cpu"):
        autocast = model(ids).logits
    assert str(autocast.dtype).replace("eager", "torch") == str(theirs["autocast_dtype"])
    bf16 = model.to(torch.bfloat16)(ids).logits
    assert bf16.dtype == torch.bfloat16
    scale = np.abs(theirs["bf16"]).max()
    for ours, key in ((autocast, "autocast"), (bf16, "bf16")):
        error = np.abs(ours.float().detach().numpy() - theirs[key]).max()
        assert error <= 2 ** -5 * scale, (key, error, scale)  # a few roundings of 2**-8
