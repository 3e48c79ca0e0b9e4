"""PyTorch programs run unmodified on kiln (eager/alias.py: `import torch` gives kiln's
modules): the program is imported once under kiln and once under PyTorch, the same
weights and batches go through both, and the losses, parameters and the scheduler's
rates agree; then the program's own main() runs to its end on kiln."""
import importlib
import sys

import numpy as np
import pytest

import eager
from eager.alias import torch_is_eager

def _import(name: str, kiln: bool):
    """The program module, its `torch` being kiln's (kiln) or PyTorch's."""
    sys.modules.pop(name, None)
    if kiln:
        with torch_is_eager():
            return importlib.import_module(name)
    pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    return importlib.import_module(name)


def test_the_alias_gives_kilns_modules_and_gives_torch_back():
    with torch_is_eager():
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader
        assert torch is eager and F is eager.nn.functional
        assert DataLoader is eager.utils.data.DataLoader
    assert sys.modules.get("torch") is not eager


def test_mnist_convnet_trains_as_pytorch_does_from_the_same_weights():
    ours, theirs = _import("examples.mnist_convnet", True), _import("examples.mnist_convnet", False)
    torch = theirs.torch
    kiln_model, torch_model = ours.Net((4, 6), 16), theirs.Net((4, 6), 16)
    torch_model.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                                 for k, v in kiln_model.state_dict().items()})
    for model in (kiln_model, torch_model):  # dropout draws differ between libraries
        model.dropout1.p = model.dropout2.p = 0.0
    images, labels = ours.synthetic_digits(96)
    runs = []
    for lib, program, model in ((eager, ours, kiln_model), (torch, theirs, torch_model)):
        optimizer = lib.optim.Adadelta(model.parameters(), lr=1.0)
        scheduler = lib.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        losses = []
        for start in range(0, 96, 32):
            x, y = lib.from_numpy(images[start:start + 32]), lib.from_numpy(labels[start:start + 32])
            optimizer.zero_grad()
            loss = program.F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        runs.append((losses, scheduler.get_last_lr(),
                     {k: v.detach().numpy() for k, v in model.state_dict().items()}))
    (our_losses, our_lr, our_state), (their_losses, their_lr, their_state) = runs
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    assert our_lr == pytest.approx(their_lr)
    for name in their_state:
        np.testing.assert_allclose(our_state[name], their_state[name], rtol=1e-3, atol=1e-5,
                                   err_msg=name)


def test_mnist_convnet_main_runs_to_its_end_on_kiln_and_learns(capsys):
    program = _import("examples.mnist_convnet", True)
    with torch_is_eager():
        loss, accuracy = program.main(["--epochs", "2", "--train-samples", "512",
                                       "--test-samples", "128", "--batch-size", "32",
                                       "--channels", "4", "8", "--hidden", "16",
                                       "--log-interval", "100"])
    printed = capsys.readouterr().out
    assert "Train Epoch: 2" in printed and "Test set: Average loss" in printed
    assert accuracy > 0.3  # ten classes: chance is 0.1


def test_gpt_trains_with_clipping_and_generates_as_pytorch_does():
    ours, theirs = _import("examples.gpt", True), _import("examples.gpt", False)
    torch = theirs.torch
    codes, chars = ours.load_text()
    config = dict(block_size=16, vocab_size=len(chars), n_layer=2, n_head=2, n_embd=16)
    kiln_model, torch_model = ours.GPT(ours.GPTConfig(**config)), theirs.GPT(
        theirs.GPTConfig(**config))
    torch_model.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                                 for k, v in kiln_model.state_dict().items()})
    starts = np.random.default_rng(0).integers(0, len(codes) - 17, (4, 8))
    runs = []
    for lib, model in ((eager, kiln_model), (torch, torch_model)):
        optimizer = model.configure_optimizers(0.1, 3e-3, (0.9, 0.99))
        losses, norms = [], []
        for it, rows in enumerate(starts):
            for group in optimizer.param_groups:
                group["lr"] = ours.get_lr(it, 1, 4, 3e-3, 3e-4)
            x = lib.tensor(np.stack([codes[s:s + 16] for s in rows]))
            y = lib.tensor(np.stack([codes[s + 1:s + 17] for s in rows]))
            _, loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
            optimizer.step()
            losses.append(loss.item())
        greedy = model.generate(lib.zeros((1, 1), dtype=lib.long), 12, top_k=1)[0].tolist()
        runs.append((losses, norms, greedy))
    (our_losses, our_norms, our_text), (their_losses, their_norms, their_text) = runs
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    np.testing.assert_allclose(our_norms, their_norms, rtol=1e-3)
    assert max(our_norms) > 1.0  # the clipping was exercised
    assert our_text == their_text  # top_k=1: the same greedy continuation


def test_gpt_main_runs_to_its_end_on_kiln():
    program = _import("examples.gpt", True)
    with torch_is_eager():
        losses, sample = program.main(["--iters", "12", "--batch-size", "4", "--block-size",
                                       "16", "--n-embd", "16", "--eval-interval", "100",
                                       "--sample", "20"])
    assert len(losses) == 12 and losses[-1] < losses[0] and len(sample) == 21


def _same_weights(kiln_model, torch_model, torch):
    torch_model.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                                 for k, v in kiln_model.state_dict().items()})


def test_a_vae_trains_as_pytorch_does():
    ours = _import("tests.examples.programs.vae", True)
    theirs = _import("tests.examples.programs.vae", False)
    torch = theirs.torch
    kiln_model, torch_model = ours.VAE(64, 32, 4), theirs.VAE(64, 32, 4)
    _same_weights(kiln_model, torch_model, torch)
    images = np.random.default_rng(0).uniform(0, 1, (5, 8, 64)).astype(np.float32)
    runs = []
    for lib, program, model in ((eager, ours, kiln_model), (torch, theirs, torch_model)):
        model.eval()  # the latent is the mean: no draws to differ between libraries
        runs.append(program.train(model, [lib.from_numpy(b) for b in images]))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-4)
    kiln_model.train()  # and sampling runs: randn_like, exp
    recon, mu, logvar = kiln_model(eager.from_numpy(images[0]))
    assert recon.shape == (8, 64) and ((recon.detach().numpy() > 0) &
                                       (recon.detach().numpy() < 1)).all()


def test_polynomial_regression_fits_as_pytorch_does(capsys):
    ours = _import("tests.examples.programs.linear_regression", True)
    theirs = _import("tests.examples.programs.linear_regression", False)
    torch = theirs.torch
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((4, 1)) * 2, rng.standard_normal(1)
    xs = rng.standard_normal((30, 32))  # float64: 30 steps on x^4 features amplify rounding
    runs = []
    for lib, program in ((eager, ours), (torch, theirs)):
        lib.manual_seed(0)
        fc = lib.nn.Linear(4, 1).double()
        with lib.no_grad():
            fc.weight.copy_(lib.tensor([[0.1, -0.2, 0.3, 0.0]], dtype=lib.float64))
            fc.bias.copy_(lib.tensor([0.5], dtype=lib.float64))
        w_t, b_t = lib.tensor(w), lib.tensor(b)
        batches = [(program.make_features(lib.from_numpy(x)),
                    program.f(program.make_features(lib.from_numpy(x)), w_t, b_t)) for x in xs]
        runs.append((program.fit(fc, batches), program.poly_desc(fc.weight.view(-1), fc.bias)))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-10)
    assert runs[0][1] == runs[1][1]  # '{:+.2f}'.format of zero-dim tensors
    with torch_is_eager():
        losses, *_ = ours.main(steps=300)
    assert losses[-1] < 0.1 * losses[0]
    assert "==> Learned function:" in capsys.readouterr().out


def test_an_lstm_word_language_model_trains_as_pytorch_does():
    ours = _import("tests.examples.programs.word_language_model", True)
    theirs = _import("tests.examples.programs.word_language_model", False)
    torch = theirs.torch
    kiln_model = ours.RNNModel(30, 12, 12, 2, dropout=0.0, tie_weights=True)
    torch_model = theirs.RNNModel(30, 12, 12, 2, dropout=0.0, tie_weights=True)
    _same_weights(kiln_model, torch_model, torch)
    words = np.random.default_rng(0).integers(0, 30, 4 * 23)
    runs = []
    for lib, program, model in ((eager, ours, kiln_model), (torch, theirs, torch_model)):
        data = program.batchify(lib.tensor(words), 4)
        runs.append(program.train_epoch(model, data, bptt=7, lr=2.0))
    assert len(runs[0]) == 4  # 22 targets in bptt windows of 7
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-4)


def test_a_time_series_lstm_cell_model_trains_as_pytorch_does():
    ours = _import("tests.examples.programs.time_series", True)
    theirs = _import("tests.examples.programs.time_series", False)
    torch = theirs.torch
    kiln_model, torch_model = ours.Sequence(8).double(), theirs.Sequence(8).double()
    _same_weights(kiln_model, torch_model, torch)
    t = np.arange(21) + np.random.default_rng(0).integers(-4, 4, (3, 1))
    waves = np.sin(t / 3.0)
    runs = []
    for lib, program, model in ((eager, ours, kiln_model), (torch, theirs, torch_model)):
        losses, pred = program.train(model, lib.tensor(waves[:, :-1]), lib.tensor(waves[:, 1:]),
                                     steps=4)
        runs.append((losses, pred.numpy()))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-10)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-9, atol=1e-12)
    assert runs[0][1].shape == (2, 25)  # 20 steps and 5 predicted beyond them
