"""The training benchmarks' models written out in float64 numpy, for the correctness
gate: the loss of the first step, from the same initial weights and batch.

`state` maps the models' state_dict names (PyTorch's) to arrays; Linear weights are
(out_features, in_features).
"""
from __future__ import annotations

import math

import numpy as np

EPS = 1e-5  # LayerNorm's default


def cross_entropy(logits: np.ndarray, target: np.ndarray) -> float:
    """Mean negative log-likelihood of integer targets under softmax(logits)."""
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-log_probs[np.arange(len(target)), target].mean())


def linear(x: np.ndarray, state: dict, name: str) -> np.ndarray:
    out = x @ state[f"{name}.weight"].T
    bias = state.get(f"{name}.bias")
    return out if bias is None else out + bias


def layer_norm(x: np.ndarray, state: dict, name: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * state[f"{name}.weight"] + state[f"{name}.bias"]


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU, with math.erf element by element: numpy has no erf."""
    erf = np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2.0)).astype(np.float64)
    return 0.5 * x * (1.0 + erf)


def mlp_loss(state: dict, x: np.ndarray, y: np.ndarray) -> float:
    """examples.mlp_classifier.make_model: Linear, ReLU, Linear, ReLU, Linear."""
    h = np.maximum(linear(x, state, "0"), 0.0)
    h = np.maximum(linear(h, state, "2"), 0.0)
    return cross_entropy(linear(h, state, "4"), y)


def transformer_loss(state: dict, x: np.ndarray, y: np.ndarray, heads: int) -> float:
    """examples.char_transformer's CharTransformer: pre-norm blocks of causal
    self-attention and a GELU MLP, then a final LayerNorm and the vocabulary head."""
    h = state["tok.weight"][x] + state["pos.weight"][:x.shape[1]]
    layers = len({key.split(".")[1] for key in state if key.startswith("blocks.")})
    for i in range(layers):
        block = f"blocks.{i}"
        h = h + _attention(layer_norm(h, state, f"{block}.ln1"), state, f"{block}.attn", heads)
        mlp = gelu(linear(layer_norm(h, state, f"{block}.ln2"), state, f"{block}.mlp.0"))
        h = h + linear(mlp, state, f"{block}.mlp.2")
    logits = linear(layer_norm(h, state, "ln"), state, "head")
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _attention(x: np.ndarray, state: dict, name: str, heads: int) -> np.ndarray:
    b, t, d = x.shape
    q, k, v = np.split(linear(x, state, f"{name}.qkv"), 3, axis=-1)
    q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads)
    scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    y = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return linear(y, state, f"{name}.proj")
