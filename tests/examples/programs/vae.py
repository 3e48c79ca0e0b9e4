"""A variational autoencoder in the style of PyTorch's examples/vae, as a plain PyTorch
program (kiln's tests import it under the torch alias and under PyTorch)."""
import torch
import torch.nn.functional as F
from torch import nn, optim


class VAE(nn.Module):
    def __init__(self, pixels=784, hidden=400, latent=20):
        super().__init__()
        self.pixels = pixels
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        if not self.training:
            return mu
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, self.pixels))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar, pixels=784):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, pixels), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def train(model, batches, lr=1e-3):
    optimizer = optim.Adam(model.parameters(), lr=lr)
    losses = []
    for data in batches:
        optimizer.zero_grad()
        recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar, model.pixels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
