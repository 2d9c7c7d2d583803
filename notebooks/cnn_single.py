"""A small CNN on Fashion-MNIST, trained by ONE process: "your own script" for notebook 08.

    python cnn_single.py --root ~/data --epochs 2 --limit 6000

It knows nothing about distribution and imports nothing from ddp_tutorial: notebook 08 turns
it into DDP, one checklist item at a time. The data are torchvision's FashionMNIST files
(``ROOT/FashionMNIST/raw/*-ubyte``), read once into tensors (no per-image decoding).
"""

import argparse
import os

import torch
from torch import nn
from torchvision.datasets import FashionMNIST


class SmallCNN(nn.Module):
    """28×28 → conv 8 → pool → conv 16 → pool → 10 classes (about 8 000 parameters)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(16 * 7 * 7, 10)

    def forward(self, images):
        return self.classifier(self.features(images).flatten(1))


def load(root, train=True, limit=None):
    """Images (N×1×28×28, normalised) and labels of the training or the test set."""
    data = FashionMNIST(root, train=train, download=False)
    images = data.data[:limit].unsqueeze(1).float().div(255)
    return (images - 0.2860) / 0.3530, data.targets[:limit]


def accuracy(model, images, labels):
    """Percent of correct predictions, without building a graph."""
    with torch.no_grad():
        return (model(images).argmax(dim=1) == labels).float().mean().item() * 100


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("DDP_TUTORIAL_ROOT", "data"))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--limit", type=int, default=None, help="use only the first LIMIT images")
    parser.add_argument("--save", default="cnn.pt")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    images, labels = load(args.root, True, args.limit)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(0)
    for epoch in range(args.epochs):
        for batch in torch.randperm(len(images), generator=generator).split(args.batch_size):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images[batch]), labels[batch])
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.4f}")
    test_images, test_labels = load(args.root, False, args.limit)
    print(f"test accuracy {accuracy(model, test_images, test_labels):.2f} %")
    torch.save(model.state_dict(), args.save)
    return model


if __name__ == "__main__":
    main()
