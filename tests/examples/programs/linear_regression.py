"""Polynomial regression in the style of PyTorch's examples/regression, as a plain
PyTorch program: fit a degree-4 polynomial with one nn.Linear, smooth_l1_loss, and a
hand-written SGD step on param.data."""
import torch
import torch.nn.functional as F

POLY_DEGREE = 4


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x, w_target, b_target):
    return x.mm(w_target) + b_target.item()


def poly_desc(W, b):
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    result += "{:+.2f}".format(b[0])
    return result


def get_batch(w_target, b_target, batch_size=32):
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x, w_target, b_target)
    return x, y


def fit(fc, batches, lr=0.1):
    losses = []
    for batch_x, batch_y in batches:
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            param.data.add_(-lr * param.grad)
        losses.append(loss)
    return losses


def main(steps=2000):
    torch.manual_seed(0)
    w_target = torch.randn(POLY_DEGREE, 1) * 5
    b_target = torch.randn(1) * 5
    fc = torch.nn.Linear(w_target.size(0), 1)
    losses = fit(fc, (get_batch(w_target, b_target) for _ in range(steps)))
    print("Loss: {:.6f} after {} batches".format(losses[-1], len(losses)))
    print("==> Learned function:\t" + poly_desc(fc.weight.view(-1), fc.bias))
    print("==> Actual function:\t" + poly_desc(w_target.view(-1), b_target))
    return losses, fc, w_target, b_target
