"""The classic PyTorch MNIST convnet, written as a plain PyTorch program: two 3x3
convolutions, a max pool, dropout, two linear layers, log_softmax with nll_loss,
Adadelta with StepLR, a DataLoader over a TensorDataset. It runs on PyTorch, or on kiln
unmodified:

    python examples/mnist_convnet.py --epochs 1            # PyTorch
    python -m eager.alias examples/mnist_convnet.py --epochs 1   # kiln

No network here, so no MNIST download: the images are synthetic 28x28 digits, each
class a seeded stroke pattern drawn with random shifts and noise (`synthetic_digits`).
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, channels=(32, 64), hidden=128):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels[0], 3, 1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(channels[1] * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def synthetic_digits(count, seed=0):
    """(images (count, 1, 28, 28) float32, labels (count,) int64): class c is a fixed
    random walk of strokes, drawn shifted by up to 3 pixels, with noise."""
    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 28, 28), np.float32)
    walk = np.random.default_rng(1234)
    for c in range(10):
        r, col = walk.integers(6, 22, 2)
        for _ in range(60):
            templates[c, r, col] = 1.0
            r = int(np.clip(r + walk.integers(-1, 2), 4, 23))
            col = int(np.clip(col + walk.integers(-1, 2), 4, 23))
    labels = rng.integers(0, 10, count)
    images = np.zeros((count, 1, 28, 28), np.float32)
    for i, c in enumerate(labels):
        dy, dx = rng.integers(-3, 4, 2)
        images[i, 0] = np.roll(templates[c], (dy, dx), (0, 1))
    images += rng.normal(0, 0.3, images.shape).astype(np.float32)
    return (images - 0.1307) / 0.3081, labels.astype(np.int64)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}"
                  f" ({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    accuracy = correct / len(test_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/"
          f"{len(test_loader.dataset)} ({100. * accuracy:.0f}%)\n")
    return test_loss, accuracy


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch MNIST-style convnet")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--train-samples", type=int, default=6000)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--channels", type=int, nargs=2, default=(32, 64))
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set = TensorDataset(*(torch.from_numpy(a)
                                for a in synthetic_digits(args.train_samples, seed=0)))
    test_set = TensorDataset(*(torch.from_numpy(a)
                               for a in synthetic_digits(args.test_samples, seed=1)))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)

    model = Net(args.channels, args.hidden).to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    result = None
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        result = test(model, device, test_loader)
        scheduler.step()
    return result


if __name__ == "__main__":
    main()
