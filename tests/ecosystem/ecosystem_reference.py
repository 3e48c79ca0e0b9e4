"""The reference side of tests/ecosystem, run as its own process with PyTorch:

    python tests/ecosystem/ecosystem_reference.py OUT.npz MODEL

builds MODEL with its library on PyTorch, runs every stage (ecosystem_zoo.run) and
writes the initial state and the results to OUT.npz."""
import sys

import numpy as np

import ecosystem_zoo as zoo


def main(out: str, name: str) -> None:
    import torch
    torch.use_deterministic_algorithms(True)
    zoo.define_torchvision_operators(torch)
    results = zoo.run(name, zoo.stages_of(name)[-1])
    np.savez(out, **zoo.flatten(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
