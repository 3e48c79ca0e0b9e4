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
