"""transformers' GPT-2, Llama and BERT, timm's ResNet-18 and ViT-Tiny, torchvision's
ResNet-18 and MobileNetV3-Small, built by the libraries' own code on kiln, against the
same models on PyTorch with the same weights: the output and loss of a forward pass,
every parameter's gradient, every parameter and buffer after one optimizer step, and for
the causal language models the tokens of greedy generation."""
from __future__ import annotations

import numpy as np
import pytest

import ecosystem_zoo as zoo

CASES = [(name, stage) for name in zoo.LANGUAGE_MODELS + zoo.VISION_MODELS
         for stage in zoo.stages_of(name)]
TOLERANCE = {"forward": 1e-4, "backward": 1e-4, "step": 1e-4}


def max_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    if ours.size == 0:
        return 0.0
    return float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64))))


@pytest.mark.parametrize("name, stage", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_the_librarys_model_matches_pytorch(name, stage, reference, kiln_torch):
    zoo.need(zoo.LIBRARY[name], *(("torchvision",) if name.startswith("timm") else ()))
    theirs = reference(name)
    ours = zoo.run(name, stage, initial=theirs["initial"])
    assert ours[stage].keys() == theirs[stage].keys()
    for key, expected in theirs[stage].items():
        got = ours[stage][key]
        assert got.shape == expected.shape, key
        if stage == "generate" or expected.dtype.kind in "iub":
            np.testing.assert_array_equal(got, expected, err_msg=key)
        else:
            scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
            error = max_error(got, expected)
            assert error <= TOLERANCE[stage] * scale, f"{key}: max error {error:.3g}"
