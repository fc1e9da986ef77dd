#!/usr/bin/python3
"""Exports the TorchScript models that the example recipes and the recipe tests use.

Run with Debian's python3-torch (only /usr/bin/python3 has it):

    /usr/bin/python3 scripts/export_models.py

It writes (weights from a fixed seed, so only archive metadata differs between runs):
  recipes/models/mlp.pt         784-256-10 MLP for the Fashion-MNIST quickstart
  recipes/models/cnn.pt         small CNN for Fashion-MNIST as [1, 28, 28] images
  recipes/models/mlp49.pt       49-64-10 MLP for the CSV example (7x7 thumbnails)
  recipes/models/tokens.pt      embedding-bag classifier for the JSONL example
  recipes/models/byte_gpt.pt    byte-level GPT (vocabulary 256, context 64, 2 layers) for the tokens example
  tests/fixtures/models/bn_cnn.pt    CNN with BatchNorm buffers and a "head" layer (end-to-end tests)
  tests/fixtures/models/mlp_small.pt 784-32-10 MLP (end-to-end tests)
  tests/fixtures/models/mlp_deep.pt  784-256-256-10 ReLU MLP (QAdam and ByteGrad accuracy)
  tests/fixtures/recipes/models/tiny.pt  4-3-2 MLP, a small file for the recipe tests
  tests/fixtures/recipes/data/tiny-tensors.pt  {'input': 4x4, 'target': 4} for the tensors format

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


class CNN(nn.Module):
    """Two conv blocks and a linear head over [N, 1, 28, 28] images."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class BNCNN(nn.Module):
    """A small CNN with BatchNorm (running-statistics buffers) for the tests."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        return self.head(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


class TokenClassifier(nn.Module):
    """Mean of token embeddings (padding id 0 excluded), then a linear layer."""

    def __init__(self, vocab=197, dim=32, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        mask = (tokens != 0).unsqueeze(-1).to(torch.float32)
        summed = (self.embed(tokens) * mask).sum(1)
        count = mask.sum(1).clamp(min=1.0)
        return self.head(summed / count)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions <= t."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / float(c // self.heads) ** 0.5)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then a GELU MLP, each residual."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ByteGPT(nn.Module):
    """A small GPT over token ids [B, T] (T <= context); returns logits [B, T, vocab]."""

    def __init__(self, vocab=256, context=64, dim=128, heads=4, layers=2):
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        t = tokens.size(1)
        positions = torch.arange(t, device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        return self.head(self.ln(self.blocks(x)))


def gpt_init(model):
    """GPT-2's initialisation: weights N(0, 0.02), biases 0, LayerNorm 1."""
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            nn.init.normal_(p, mean=0.0, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


def export(model, path, init=None):
    torch.manual_seed(0)
    if init is not None:
        init(model)
    for name, p in (model.named_parameters() if init is None else []):
        # Re-initialise under the fixed seed so the file is reproducible
        # (BatchNorm scales keep their 1s).
        if p.dim() > 1:
            nn.init.kaiming_uniform_(p, a=5 ** 0.5)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    scripted = torch.jit.script(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    scripted.save(path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    export(MLP([784, 256, 10]), os.path.join(root, "recipes", "models", "mlp.pt"))
    export(MLP([4, 3, 2]), os.path.join(root, "tests", "fixtures", "recipes", "models", "tiny.pt"))
    export(CNN(), os.path.join(root, "recipes", "models", "cnn.pt"))
    export(MLP([49, 64, 10]), os.path.join(root, "recipes", "models", "mlp49.pt"))
    export(TokenClassifier(), os.path.join(root, "recipes", "models", "tokens.pt"))
    export(ByteGPT(), os.path.join(root, "recipes", "models", "byte_gpt.pt"), init=gpt_init)
    export(BNCNN(), os.path.join(root, "tests", "fixtures", "models", "bn_cnn.pt"))
    export(MLP([784, 32, 10]), os.path.join(root, "tests", "fixtures", "models", "mlp_small.pt"))
    export(MLP([784, 256, 256, 10]), os.path.join(root, "tests", "fixtures", "models", "mlp_deep.pt"))
    torch.manual_seed(0)
    tensors = {"input": torch.rand(4, 4), "target": torch.tensor([0, 1, 1, 0])}
    path = os.path.join(root, "tests", "fixtures", "recipes", "data", "tiny-tensors.pt")
    torch.save(tensors, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
