"""One model-scale workload, timed in this process alone, as a user runs it: a PyTorch
program (`import torch`) that runs on PyTorch, or on kiln under the alias.

    python benchmarks/model_step.py CASE MODE THREADS STEPS [WARMUP]                # PyTorch
    python -m eager.alias benchmarks/model_step.py CASE MODE THREADS STEPS [WARMUP] # kiln

CASE   gpt_step         examples/gpt.py's GPT, 6 layers, d 384, 6 heads, context 64,
                        batch 8, vocabulary 65: forward, loss, backward, AdamW step
       resnet_step      examples/resnet.py's ResNet-18 on 3x32x32 images, batch 8, ten
                        classes: forward, cross entropy, backward, SGD momentum step
       gpt2_forward_b1  GPT-2 small's shape (12 layers, d 768, 12 heads, context 256,
       gpt2_forward_b8  vocabulary 50257) forward on a full context under no_grad, the
                        last position's logits (generation's prefill), batch 1 or 8
MODE   eager or compiled: torch.compile of the step (kiln: eager.compile, the whole
       step one function) or, for PyTorch, of the model (inductor's recommended use:
       dynamo breaks a step's graph at backward() and compiles the optimizer apart)

Prints one JSON line: the first step's loss (the gate: every contender starts from the
same weights, set from numpy, so the losses agree), the first call's seconds (tracing
and compiling included) and the seconds of each timed step after WARMUP (default 3)
more steps.
"""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

WARMUP = 3


def _set_weights(model, std_of) -> None:
    """Every floating parameter and buffer drawn from numpy (seed 0, in state_dict
    order) with the standard deviation `std_of(name, tensor)` gives, or left as its
    constant init (LayerNorm and BatchNorm weights, biases, running statistics) where
    that is None: the same model in either library."""
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            std = std_of(name, t) if t.dtype.is_floating_point else None
            if std is not None:
                t.copy_(torch.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32)
                                     * np.float32(std)))


def _gpt(layers, d, heads, context, vocab):
    from examples.gpt import GPT, GPTConfig
    model = GPT(GPTConfig(block_size=context, vocab_size=vocab, n_layer=layers, n_head=heads,
                          n_embd=d, dropout=0.0, bias=True))
    _set_weights(model, lambda name, t: 0.02 if t.dim() >= 2 else None)
    return model


def _tokens(batch, context, vocab):
    rng = np.random.default_rng(1)
    return (torch.tensor(rng.integers(0, vocab, (batch, context))),
            torch.tensor(rng.integers(0, vocab, (batch, context))))


def gpt_step(compiled: bool):
    model = _gpt(6, 384, 6, 64, 65)
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
    x, y = _tokens(8, 64, 65)

    def step():
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        return loss
    return _compiled_step(step, model, compiled)


def resnet_step(compiled: bool):
    from examples.resnet import ResNet18

    def std_of(name, t):
        if t.dim() == 4:  # Kaiming normal, fan_out, as the model's own init
            return math.sqrt(2.0 / (t.shape[0] * t.shape[2] * t.shape[3]))
        return 1 / math.sqrt(512) if name.startswith("fc.") else None  # (its bias too)
    model = ResNet18()
    _set_weights(model, std_of)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(1)
    images = torch.tensor(rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, 10, 8))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss
    return _compiled_step(step, model, compiled)


def gpt2_forward(batch: int):
    def make(compiled: bool):
        model = _gpt(12, 768, 12, 256, 50257)
        model.eval()
        x, _ = _tokens(batch, 256, 50257)

        @torch.no_grad()
        def step():
            logits, _ = model(x)
            return logits.float().logsumexp(-1).mean()  # a loss-like number to compare
        return _compiled_step(step, model, compiled)
    return make


def _compiled_step(step, model, compiled: bool):
    if not compiled:
        return step
    if "kiln" not in torch.__version__:  # PyTorch: the model compiled, the step eager
        model.forward = torch.compile(model.forward)
        return step
    return torch.compile(step)  # kiln ("2.13.0+kiln.0.1.0"): the whole step


CASES = {"gpt_step": gpt_step, "resnet_step": resnet_step,
         "gpt2_forward_b1": gpt2_forward(1), "gpt2_forward_b8": gpt2_forward(8)}


def measure(case: str, mode: str, threads: int, steps: int, warmup: int = WARMUP) -> dict:
    torch.set_num_threads(threads)
    step = CASES[case](mode == "compiled")
    start = time.perf_counter()
    first_loss = float(step().item())
    first_call = time.perf_counter() - start
    for _ in range(warmup):
        step().item()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step().item()  # (the value read: the step has finished)
        times.append(time.perf_counter() - start)
    return {"first_loss": first_loss, "first_call": first_call, "times": times}


if __name__ == "__main__":
    case, mode, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(measure(case, mode, threads, steps, *map(int, sys.argv[5:6]))))
