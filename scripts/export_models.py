#!/usr/bin/python3
"""Exports the TorchScript models that the example recipes and the recipe tests use.

Run with Debian's python3-torch (only /usr/bin/python3 has it):

    /usr/bin/python3 scripts/export_models.py

It writes (weights from a fixed seed, so only archive metadata differs between runs):
  recipes/models/mlp.pt         784-256-10 MLP for the Fashion-MNIST quickstart
  tests/recipes/models/tiny.pt  4-3-2 MLP, a small file for the recipe tests
  tests/recipes/data/tiny-tensors.pt  {'input': 4x4, 'target': 4} for the tensors format

The outputs are committed (each well under 2 MB); rerun this script after
changing a model definition here.
"""
import os
import sys

import torch
from torch import nn


class MLP(nn.Module):
    """Flattens its input, then Linear-ReLU-Linear; returns logits."""

    def __init__(self, sizes):
        super().__init__()
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(torch.flatten(x, 1))


def export(model, path):
    torch.manual_seed(0)
    for p in model.parameters():
        # Re-initialise under the fixed seed so the file is reproducible.
        if p.dim() > 1:
            nn.init.kaiming_uniform_(p, a=5 ** 0.5)
        else:
            nn.init.zeros_(p)
    scripted = torch.jit.script(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    scripted.save(path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    export(MLP([784, 256, 10]), os.path.join(root, "recipes", "models", "mlp.pt"))
    export(MLP([4, 3, 2]), os.path.join(root, "tests", "recipes", "models", "tiny.pt"))
    torch.manual_seed(0)
    tensors = {"input": torch.rand(4, 4), "target": torch.tensor([0, 1, 1, 0])}
    path = os.path.join(root, "tests", "recipes", "data", "tiny-tensors.pt")
    torch.save(tensors, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
