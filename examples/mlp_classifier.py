"""Train a 2-hidden-layer MLP on a seeded three-arm spiral with cross-entropy and Adam.

    python -m examples.mlp_classifier
"""
from __future__ import annotations

import numpy as np

import eager
from eager import nn


def spiral(points_per_class: int = 200, classes: int = 3, seed: int = 0):
    """Interleaved spiral arms in 2-D: not linearly separable, easy for an MLP."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, points_per_class)
        theta = np.linspace(c * 4.0, (c + 1) * 4.0, points_per_class) + \
            rng.normal(0, 0.2, points_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(points_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def make_model(hidden: int = 64, classes: int = 3, inputs: int = 2, torch=eager):
    """The classifier over a PyTorch-like library (`torch=torch` builds it in PyTorch)."""
    nn = torch.nn
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def train(steps: int = 300, hidden: int = 64, points_per_class: int = 200, lr: float = 1e-2,
          seed: int = 0, log_every: int = 0) -> dict:
    eager.manual_seed(seed)
    x_np, y_np = spiral(points_per_class, seed=seed)
    x, y = eager.tensor(x_np), eager.tensor(y_np)
    model = make_model(hidden)
    opt = eager.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    with eager.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    return {"losses": losses, "accuracy": accuracy}


if __name__ == "__main__":
    result = train(log_every=50)
    print(f"final loss {result['losses'][-1]:.4f}, accuracy {result['accuracy']:.1%}")
