"""A small CNN on MNIST (or Fashion-MNIST), trained by ONE process: "your own script" for notebook 08.

    python cnn_single.py --root ~/ddp-data --epochs 2 --limit 6000

It knows nothing about distribution and imports nothing from ddp_tutorial: notebook 08 copies it
into its folder and turns it into DDP, one checklist item at a time. (The package ships it, so
the notebook finds it wherever it is opened.) The data are torchvision's files in ROOT: the workshop's
data set (``DDP_TUTORIAL_DATASET``, MNIST unless it says fashion-mnist) where it is staged there, else the
other one (``ROOT/MNIST/raw/*-ubyte`` or ``ROOT/FashionMNIST/raw/*-ubyte``). They are read once into
tensors (no per-image decoding); the training reads them the common way, through a ``DataLoader``.
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets import MNIST, FashionMNIST

# mean and standard deviation of the training images' pixels (0..1), per data set
NORMALISE = {MNIST: (0.1307, 0.3081), FashionMNIST: (0.2860, 0.3530)}


class SmallCNN(nn.Module):
    """28×28 → conv 8 → pool → conv 16 → pool → 10 classes (9 098 parameters)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(16 * 7 * 7, 10)

    def forward(self, images):
        return self.classifier(self.features(images).flatten(1))


def data_class(root):
    """MNIST or FashionMNIST: the workshop's data set where ROOT holds it, else the other one."""
    order = [MNIST, FashionMNIST]
    if os.environ.get("DDP_TUTORIAL_DATASET") == "fashion-mnist":
        order.reverse()
    for kind in order:
        if os.path.isdir(os.path.join(root, kind.__name__, "raw")):
            return kind
    raise SystemExit(f"cnn_single.py: no MNIST or Fashion-MNIST under {os.path.abspath(root)}: "
                     "pass --root with the folder you staged the data into (or set DDP_TUTORIAL_ROOT)")


def load(root, train=True, limit=None):
    """Images (N×1×28×28, normalised) and labels of the training or the test set."""
    kind = data_class(root)
    try:
        data = kind(root, train=train, download=False)
    except RuntimeError:
        raise SystemExit(f"cnn_single.py: the {kind.__name__} files under {os.path.abspath(root)} are "
                         "incomplete: stage them again (ddp-tutorial data prepare)") from None
    mean, std = NORMALISE[kind]
    # torch's default floating type: float32, unless a caller asked for float64 (notebook 08's proof)
    images = data.data[:limit].unsqueeze(1).to(torch.get_default_dtype()).div(255)
    return (images - mean) / std, data.targets[:limit]


def dataset(root, train=True, limit=None):
    """The same data as a Dataset of (image, label, index): the index tells which samples a run saw."""
    images, labels = load(root, train, limit)
    return TensorDataset(images, labels, torch.arange(len(labels)))


def accuracy(model, images, labels):
    """Percent of correct predictions, without building a graph."""
    with torch.no_grad():
        return (model(images).argmax(dim=1) == labels).float().mean().item() * 100


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("DDP_TUTORIAL_ROOT") or os.path.expanduser("~/ddp-data"))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--limit", type=int, default=None, help="use only the first LIMIT images")
    parser.add_argument("--num-workers", type=int, default=0, help="processes that prepare the batches")
    parser.add_argument("--save", default="cnn.pt")
    args = parser.parse_args(argv)

    train_set = dataset(args.root, True, args.limit)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
                        generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for images, labels, _ in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.4f}")
    test_images, test_labels = load(args.root, False, args.limit)
    print(f"test accuracy {accuracy(model, test_images, test_labels):.2f} %")
    torch.save(model.state_dict(), args.save)
    return model


if __name__ == "__main__":
    main()
