"""A character-level causal transformer (2 layers, 4 heads, d_model 64, context 32)
trained with AdamW on a public-domain paragraph shipped in examples/data, then sampled.

    python -m examples.char_transformer
"""
from __future__ import annotations

import math
import os

import numpy as np

import eager
from eager.nn import functional as F

TEXT = os.path.join(os.path.dirname(__file__), "data", "alice.txt")


def define(torch):
    """The model's classes over a PyTorch-like library: `define(eager)` for kiln,
    `define(torch)` gives the same model in PyTorch (the parity tests use both)."""

    class CausalSelfAttention(torch.nn.Module):
        def __init__(self, d_model: int, heads: int):
            super().__init__()
            self.heads = heads
            # no bias: a key bias only shifts each row of scores, which softmax ignores, so
            # its gradient is zero up to rounding noise that Adam would then amplify
            self.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=False)
            self.proj = torch.nn.Linear(d_model, d_model)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            shape = (b, t, self.heads, d // self.heads)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(torch.nn.Module):
        def __init__(self, d_model: int, heads: int):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention(d_model, heads)
            self.ln2 = torch.nn.LayerNorm(d_model)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model),
                                           torch.nn.GELU(),
                                           torch.nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class CharTransformer(torch.nn.Module):
        def __init__(self, vocab: int, d_model: int = 64, heads: int = 4, layers: int = 2,
                     context: int = 32):
            super().__init__()
            self.context = context
            self.tok = torch.nn.Embedding(vocab, d_model)
            self.pos = torch.nn.Embedding(context, d_model)
            self.blocks = torch.nn.ModuleList([Block(d_model, heads) for _ in range(layers)])
            self.ln = torch.nn.LayerNorm(d_model)
            self.head = torch.nn.Linear(d_model, vocab)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return CharTransformer


CharTransformer = define(eager)


def load_text():
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    return text, chars, np.array([chars.index(c) for c in text], dtype=np.int64)


def batches(data: np.ndarray, batch: int, context: int, rng):
    while True:
        starts = rng.integers(0, len(data) - context - 1, batch)
        x = np.stack([data[s:s + context] for s in starts])
        y = np.stack([data[s + 1:s + context + 1] for s in starts])
        yield eager.tensor(x), eager.tensor(y)


def sample(model: CharTransformer, chars, prompt: str, length: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    idx = [chars.index(c) for c in prompt]
    model.eval()
    with eager.no_grad():
        for _ in range(length):
            window = eager.tensor([idx[-model.context:]])
            logits = model(window)[0, -1]
            probs = F.softmax(logits, -1).double().numpy()
            idx.append(int(rng.choice(len(chars), p=probs / probs.sum())))
    model.train()
    return "".join(chars[i] for i in idx)


def train(steps: int = 300, batch: int = 16, d_model: int = 64, heads: int = 4,
          layers: int = 2, context: int = 32, lr: float = 3e-3, seed: int = 0,
          log_every: int = 0) -> dict:
    eager.manual_seed(seed)
    text, chars, data = load_text()
    model = CharTransformer(len(chars), d_model, heads, layers, context)
    opt = eager.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    stream = batches(data, batch, context, np.random.default_rng(seed))
    losses = []
    for step in range(steps):
        x, y = next(stream)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log_every and step % log_every == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
    return {"losses": losses, "model": model, "chars": chars,
            "uniform_loss": math.log(len(chars))}


if __name__ == "__main__":
    result = train(log_every=50)
    print(f"loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}")
    print(sample(result["model"], result["chars"], "Alice ", 200))
