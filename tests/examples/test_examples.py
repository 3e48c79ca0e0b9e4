"""The shipped examples train on tiny sizes: the MLP separates the spiral, the
transformer's loss falls clearly and it samples text from the training alphabet."""
import math

import pytest

from examples import char_transformer, mlp_classifier


def test_mlp_classifier_learns_the_spiral():
    result = mlp_classifier.train(steps=200, hidden=32, points_per_class=100)
    assert result["losses"][-1] < 0.1
    assert result["accuracy"] > 0.95


@pytest.mark.slow
def test_char_transformer_loss_falls_and_samples():
    result = char_transformer.train(steps=60, batch=8, d_model=32, heads=4, layers=2,
                                    context=16)
    losses = result["losses"]
    start, end = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert end < start - 1.0, (start, end)
    assert end < result["uniform_loss"]
    text = char_transformer.sample(result["model"], result["chars"], "Alice ", 40)
    assert len(text) == 46 and set(text) <= set(result["chars"])
    assert math.isfinite(end)


def test_compiled_transformer_matches_eager_and_trains():
    import numpy as np

    import compiler
    import eager
    _, chars, data = char_transformer.load_text()
    eager.manual_seed(0)
    model = char_transformer.CharTransformer(len(chars), d_model=32, heads=4, layers=1,
                                             context=16)
    x = eager.tensor(np.stack([data[i:i + 16] for i in range(4)]))
    y = eager.tensor(np.stack([data[i + 1:i + 17] for i in range(4)]))
    with eager.no_grad():
        np.testing.assert_allclose(compiler.compile(model)(x).numpy(), model(x).numpy(),
                                   rtol=1e-4, atol=1e-5)

    def loss(x, y):
        return eager.nn.functional.cross_entropy(model(x).reshape(-1, len(chars)),
                                                 y.reshape(-1))
    step = compiler.compile(loss)
    opt = eager.optim.AdamW(model.parameters(), lr=3e-3)
    first = step(x, y)
    assert abs(first.item() - loss(x, y).item()) < 1e-5
    for _ in range(5):
        opt.zero_grad()
        value = step(x, y)
        value.backward()
        opt.step()
    assert step(x, y).item() < first.item()
