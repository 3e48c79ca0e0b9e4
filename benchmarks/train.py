"""Training steps per second, kiln eager against PyTorch eager, from the same initial
weights on the same batches in the same run. kiln eager steps its optimiser with the
fused kernels (eager/backends/native/optim.py, the default); "kiln eager, per-tensor step"
with foreach=False, for comparison; "kiln compiled" runs the model under eager.compile
(compiled forward and backward graphs; the loss and the optimiser step eager); "kiln
compiled (whole step)" compiles the step itself (zero_grad, forward, loss, backward,
optimiser step) as a user would write it. Two suites live here:

mlp_cases          examples.mlp_classifier's MLP at 784-256-256-10 (MNIST-shaped
                   random inputs), batch 128, float32, Adam (lr 1e-3), cross_entropy.
transformer_cases  examples.char_transformer (2 layers, 4 heads, d_model 64, context 32)
                   on batches of 16 from its text, AdamW (lr 3e-3, weight decay 0.01).

One timed call is one optimiser step (forward, loss, backward, step) on the next of a
few fixed batches; --quick runs fewer steps because it runs fewer, shorter rounds. The
gate: the first step's loss, before any update, matches the float64 numpy model in
train_reference to 1e-4 relative, so both libraries start from the same weights and
compute the same loss. (tests/examples/test_torch_parity.py checks that 20 updates
agree with PyTorch too.)
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from benchmarks import train_reference
from benchmarks.harness import Case, Impl
from benchmarks.impls import KILN, KILN_COMPILED, TORCH, kiln_tensors, torch_tensors

BATCHES = 8  # distinct batches, cycled
MLP_INPUTS, MLP_HIDDEN, MLP_CLASSES, MLP_BATCH = 784, 256, 10, 128
D_MODEL, HEADS, LAYERS, CONTEXT, TEXT_BATCH = 64, 4, 2, 32, 16
KILN_PER_TENSOR = "kiln eager, per-tensor step"
KILN_WHOLE_STEP = "kiln compiled (whole step)"


@dataclass(frozen=True)
class Training:
    """One training problem: the model (a function of the library), the optimiser (of
    the library and the parameters, with options), the loss (of the library, model and
    a batch), the initial weights, the batches, and the float64 loss of the first batch
    (train_reference)."""
    name: str
    model: Callable
    optimizer: Callable
    loss: Callable
    initial: Callable[[], dict]
    data: list
    expected: Callable[[], float]


def mlp_training() -> Training:
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((MLP_BATCH, MLP_INPUTS), dtype=np.float32),
             rng.integers(0, MLP_CLASSES, MLP_BATCH)) for _ in range(BATCHES)]

    def model(lib):
        from examples.mlp_classifier import make_model
        return make_model(MLP_HIDDEN, MLP_CLASSES, MLP_INPUTS, torch=lib)

    def adam(lib, parameters, **options):
        return lib.optim.Adam(parameters, lr=1e-3, **options)

    initial = _initial_state(model)
    name = (f"MLP {MLP_INPUTS}-{MLP_HIDDEN}-{MLP_HIDDEN}-{MLP_CLASSES}, "
            f"batch {MLP_BATCH}, Adam step")
    return Training(name, model, adam, _classify, initial, data,
                    lambda: train_reference.mlp_loss(_float64(initial()), *data[0]))


def transformer_training() -> Training:
    from examples.char_transformer import load_text
    _, chars, text = load_text()
    rng = np.random.default_rng(0)
    data = [_text_batch(text, rng) for _ in range(BATCHES)]

    def model(lib):
        from examples.char_transformer import define
        return define(lib)(len(chars), D_MODEL, HEADS, LAYERS, CONTEXT)

    def adamw(lib, parameters, **options):
        return lib.optim.AdamW(parameters, lr=3e-3, weight_decay=0.01, **options)

    def next_characters(lib, model, x, y):
        logits = model(x)
        return lib.nn.functional.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))

    initial = _initial_state(model)
    name = (f"char transformer, {LAYERS} layers, {HEADS} heads, d_model {D_MODEL}, "
            f"context {CONTEXT}, batch {TEXT_BATCH}, AdamW step")
    return Training(name, model, adamw, next_characters, initial, data,
                    lambda: train_reference.transformer_loss(
                        _float64(initial()), *data[0], heads=HEADS))


def mlp_cases(quick: bool) -> list[Case]:
    """The sizes are the benchmark's own; `quick` only means fewer rounds."""
    return [_training_case(mlp_training())]


def transformer_cases(quick: bool) -> list[Case]:
    """The sizes are the benchmark's own; `quick` only means fewer rounds."""
    return [_training_case(transformer_training())]


def _classify(lib, model, x, y):
    return lib.nn.functional.cross_entropy(model(x), y)


def _text_batch(text: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Windows of the text and the same windows one character on (the targets)."""
    starts = rng.integers(0, len(text) - CONTEXT - 1, TEXT_BATCH)
    return (np.stack([text[s:s + CONTEXT] for s in starts]),
            np.stack([text[s + 1:s + CONTEXT + 1] for s in starts]))


def _training_case(t: Training) -> Case:
    def in_kiln(compile_model=None, compile_step=None, **options):
        import eager
        return _trainer(eager, kiln_tensors, t.model, functools.partial(t.optimizer, **options),
                        t.loss, t.initial(), t.data, compile_model, compile_step)

    def in_kiln_compiled():  # the model compiled (forward and backward graphs); the
        import eager         # loss, backward's engine and the optimiser step run eagerly
        return in_kiln(compile_model=eager.compile)

    def in_kiln_whole_step():
        import eager
        return in_kiln(compile_step=eager.compile)

    def in_torch():
        import torch
        return _trainer(torch, torch_tensors, t.model, t.optimizer, t.loss, t.initial(),
                        t.data)

    return Case(t.name, [Impl(KILN, in_kiln),
                         Impl(KILN_PER_TENSOR, functools.partial(in_kiln, foreach=False)),
                         Impl(KILN_COMPILED, in_kiln_compiled),
                         Impl(KILN_COMPILED, in_kiln_whole_step, label=KILN_WHOLE_STEP),
                         Impl(TORCH, in_torch)], expected=t.expected,
                unit="steps/s", reference=(TORCH,))


def _trainer(lib, tensors: Callable, model: Callable, optimizer: Callable, loss: Callable,
             initial: dict, data: list, compile_model=None,
             compile_step=None, autocast=None) -> Callable[[], object]:
    """One optimiser step per call, on the next batch; returns the step's loss.
    `compile_model` compiles the model alone, `compile_step` the whole step; with
    `autocast` (a dtype's name) the forward and loss run under lib.autocast("cpu")."""
    module = model(lib)
    module.load_state_dict(dict(zip(initial, tensors(list(initial.values())))))
    opt = optimizer(lib, module.parameters())
    net = compile_model(module) if compile_model else module
    batches = itertools.cycle([tuple(tensors([x, y])) for x, y in data])

    def train_step(x, y):
        opt.zero_grad()
        if autocast:
            with lib.autocast("cpu", dtype=getattr(lib, autocast)):
                value = loss(lib, net, x, y)
        else:
            value = loss(lib, net, x, y)
        value.backward()
        opt.step()
        return value
    train_step = compile_step(train_step) if compile_step else train_step

    def step():
        return train_step(*next(batches))
    return step


def _initial_state(model: Callable) -> Callable[[], dict]:
    """The initial weights as float32 arrays, drawn once by kiln's seeded initialisers
    and then given to every contender (and to the float64 reference)."""
    @functools.cache
    def state() -> dict:
        import eager
        eager.manual_seed(0)
        return {k: v.numpy().copy() for k, v in model(eager).state_dict().items()}
    return state


def _float64(state: dict) -> dict:
    return {k: v.astype(np.float64) for k, v in state.items()}
