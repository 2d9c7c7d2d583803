"""Tests of ddp_tutorial.data (loading, batches) and the basics of ddp_tutorial.staging (import, checks,
locks, messages); the weak cases of staging are in tests/test_staging.py."""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import MNIST
from torchvision.transforms import ToTensor

from ddp_tutorial import data, datasets, staging
from ddp_tutorial.i18n import TutorialError, catalogue

try:
    from idx_files import label_bytes, write_mnist_like
except ImportError:  # tests/ imported as a package
    from tests.idx_files import label_bytes, write_mnist_like

import data_fixtures  # noqa: E402

genuine_mnist_root = data_fixtures.genuine_mnist_root  # the fixture: genuine MNIST, staged by scripts/test.sh

REPO = Path(__file__).resolve().parents[1]
N_TRAIN, N_TEST = 300, 60


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")


@pytest.fixture
def root(tmp_path) -> Path:
    """Tiny MNIST-like files staged in place, uncompressed."""
    return write_mnist_like(tmp_path / "root", n_train=N_TRAIN, n_test=N_TEST)


@pytest.fixture
def gz_dir(tmp_path) -> Path:
    """The same files as ``root`` (same seed) as a directory of .gz files."""
    return write_mnist_like(tmp_path / "src", n_train=N_TRAIN, n_test=N_TEST, gz=True)


def raw(root: Path, name: str, dataset: str = "mnist") -> Path:
    return data.raw_folder(dataset, root) / name


def idx_array(path: Path, header: int) -> np.ndarray:
    return np.frombuffer(path.read_bytes()[header:], dtype=np.uint8)


# ------------------------------------------------------------------ loading


def test_load_in_place(root):
    for train, n, split in ((True, N_TRAIN, "train"), (False, N_TEST, "t10k")):
        d = data.load("mnist", root, train=train)
        assert len(d) == n and d.name == "mnist"
        assert d.images.shape == (n, 28, 28) and d.images.dtype == torch.uint8
        assert d.labels.shape == (n,) and d.labels.dtype == torch.int64
        assert d.classes == MNIST.classes
        assert (d.num_features, d.num_classes) == (784, 10)
        # The values are exactly the bytes of the files.
        images = idx_array(raw(root, f"{split}-images-idx3-ubyte"), 16).reshape(n, 28, 28)
        labels = idx_array(raw(root, f"{split}-labels-idx1-ubyte"), 8)
        assert np.array_equal(d.images.numpy(), images)
        assert np.array_equal(d.labels.numpy(), labels)


def test_load_equals_torchvision_without_importing_it(root, tmp_path):
    """data.load reads the IDX bytes itself (2 s less start-up per rank); the tensors and class
    names are those of torchvision's classes, and the training code never imports torchvision."""
    fashion = write_mnist_like(tmp_path / "fashion", n_train=N_TRAIN, n_test=N_TEST, dataset="fashion-mnist")
    from torchvision.datasets import FashionMNIST
    for name, cls, where in (("mnist", MNIST, root), ("fashion-mnist", FashionMNIST, fashion)):
        for train in (True, False):
            ours, theirs = data.load(name, where, train=train), cls(str(where), train=train, download=False)
            assert torch.equal(ours.images, theirs.data) and ours.images.dtype == theirs.data.dtype
            assert torch.equal(ours.labels, theirs.targets.long()) and ours.classes == theirs.classes
    code = "import sys, ddp_tutorial.train, ddp_tutorial.ipp.remote; print('torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "importing the training code imports torchvision (2 s per rank)"


def test_batch_equals_torchvision_to_tensor(root):
    d = data.load("mnist", root, train=True)
    reference = MNIST(str(root), train=True, download=False, transform=ToTensor())
    indices = torch.tensor([5, 0, 299, 17, 17, 123])
    x, y = d.batch(indices)
    assert x.shape == (6, 784) and x.dtype == torch.float32
    assert y.dtype == torch.int64
    expected_x = torch.stack([reference[i][0].reshape(-1) for i in indices.tolist()])
    expected_y = torch.tensor([reference[i][1] for i in indices.tolist()])
    assert torch.equal(x, expected_x)  # bit for bit, not just close
    assert torch.equal(y, expected_y)
    assert 0.0 <= x.min() and x.max() <= 1.0


def test_first_keeps_the_first_samples_of_the_split(root):
    """``load(..., first=N)`` (``--train-subset N``): the split's first N images and labels, nothing else."""
    whole, first = data.load("mnist", root, train=True), data.load("mnist", root, train=True, first=7)
    assert len(first) == 7 and first.num_features == whole.num_features and first.classes == whole.classes
    assert torch.equal(first.images, whole.images[:7]) and torch.equal(first.labels, whole.labels[:7])
    assert len(data.load("mnist", root, train=True, first=None)) == len(whole)


def test_to_moves_both_tensors_and_batches_follow(root):
    d = data.load("mnist", root, train=True)
    assert d.to("cpu") is d  # already there: no copy
    indices = torch.tensor([3, 1, 4, 1, 5])
    # The "meta" device runs the same code without memory or a GPU: both tensors move, batches are
    # cut where the data lives.
    meta = d.to("meta")
    assert (meta.images.device.type, meta.labels.device.type) == ("meta", "meta")
    x, y = meta.batch(indices)
    assert (x.device.type, y.device.type, x.shape, x.dtype) == ("meta", "meta", (5, 784), torch.float32)
    assert d.images.device.type == "cpu"  # the original is left where it was
    if torch.cuda.is_available():  # on a GPU: the same numbers, bit for bit
        gpu = d.to("cuda")
        gx, gy = gpu.batch(indices)
        cx, cy = d.batch(indices)
        assert gx.is_cuda and gy.is_cuda
        assert torch.equal(gx.cpu(), cx) and torch.equal(gy.cpu(), cy)


def test_prepare_from_gz_dir(tmp_path, gz_dir, root, capsys):
    target = tmp_path / "staged"
    assert data.prepare("mnist", target, from_dir=gz_dir) == target
    assert f"Staged {N_TRAIN} train / {N_TEST} test images of mnist in {target}" in capsys.readouterr().out
    for name in data.ALL_FILES:  # decompressed, byte-identical to the in-place files
        assert raw(target, name).read_bytes() == raw(root, name).read_bytes()
    assert torch.equal(data.load("mnist", target, False).images, data.load("mnist", root, False).images)

    # Idempotent: a second call finds everything in place and changes nothing.
    before = {name: raw(target, name).stat().st_mtime_ns for name in data.ALL_FILES}
    data.prepare("mnist", target, from_dir=gz_dir)
    assert "already staged" in capsys.readouterr().out
    assert before == {name: raw(target, name).stat().st_mtime_ns for name in data.ALL_FILES}


def test_prepare_from_uncompressed_dir_and_torchvision_layout(tmp_path, root):
    # --from accepts a plain directory of IDX files, or a data root copied from elsewhere.
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in data.ALL_FILES:
        (flat / name).write_bytes(raw(root, name).read_bytes())
    data.prepare("mnist", tmp_path / "a", from_dir=flat, verbose=False)
    data.prepare("mnist", tmp_path / "b", from_dir=root, verbose=False)
    assert data.check("mnist", tmp_path / "a") == data.check("mnist", tmp_path / "b") == (N_TRAIN, N_TEST)


def test_prepare_replaces_damaged_files(tmp_path, gz_dir):
    target = data.prepare("mnist", tmp_path / "t", from_dir=gz_dir, verbose=False)
    path = raw(target, "train-images-idx3-ubyte")
    path.write_bytes(path.read_bytes()[:1000])
    data.prepare("mnist", target, from_dir=gz_dir, verbose=False)
    assert data.check("mnist", target) == (N_TRAIN, N_TEST)


# fashion_root: the suite's shared fixture (tests/helpers/data_fixtures.py), staged once per session.
def test_fashion_mnist_from_debian(fashion_root):
    train = data.load("fashion-mnist", fashion_root, train=True)
    test = data.load("fashion-mnist", fashion_root, train=False)
    assert (len(train), len(test)) == (60000, 10000)
    assert train.classes[0] == "T-shirt/top" and train.num_classes == 10
    assert round(train.images.float().div(255).mean().item(), 3) == 0.286
    assert torch.bincount(train.labels).tolist() == [6000] * 10
    x, _ = train.batch(torch.arange(60000))  # the whole set in one go: mean of batch() too
    assert round(x.mean().item(), 3) == 0.286


# genuine_mnist_root: staged offline through pip by scripts/fetch_mnist.py (scripts/test.sh); skips where the
# archive could not be had.
def test_genuine_mnist_loads_like_torchvision(genuine_mnist_root):
    train = data.load("mnist", genuine_mnist_root, train=True)
    test = data.load("mnist", genuine_mnist_root, train=False)
    assert (len(train), len(test)) == (60000, 10000)
    assert train.classes == MNIST.classes and train.classes[0] == "0 - zero"
    pixels = train.images.float().div(255)
    # The normalisation constants every MNIST tutorial quotes: mean 0.1307, std 0.3081.
    assert round(pixels.mean().item(), 4) == 0.1307 and round(pixels.std().item(), 4) == 0.3081
    assert torch.bincount(test.labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    reference = MNIST(str(genuine_mnist_root), train=False, download=False)
    assert torch.equal(test.images, reference.data) and torch.equal(test.labels, reference.targets.long())


# ------------------------------------------------------------------ concurrency

CHILD = """
import sys, time
from pathlib import Path
from ddp_tutorial import staging  # no torch import: four children start in a fraction of a second
ready, go = Path(sys.argv[3]), Path(sys.argv[4])
ready.touch()
while not go.exists():        # start together, to make them race for the lock
    time.sleep(0.005)
staging.prepare("mnist", sys.argv[1], from_dir=sys.argv[2])
"""


def test_concurrent_prepare(tmp_path):
    src = write_mnist_like(tmp_path / "src", n_train=4096, n_test=512, gz=True)
    expected = write_mnist_like(tmp_path / "expected", n_train=4096, n_test=512)
    target, go = tmp_path / "shared-root", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(src), str(tmp_path / f"ready{i}"),
                               str(go)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(4)]
    deadline = time.monotonic() + 40
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=40)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    assert sum("Staged" in out for out in outputs) >= 1  # somebody did the work ...
    for name in data.ALL_FILES:  # ... and the files are whole
        assert raw(target, name).read_bytes() == raw(expected, name).read_bytes()
    assert not list(data.raw_folder("mnist", target).glob(".*"))  # no temporary files left
    assert data.check("mnist", target) == (4096, 512)


# ------------------------------------------------------------------ validation errors


def error_of(call, *args, **kwargs) -> TutorialError:
    with pytest.raises(TutorialError) as info:
        call(*args, **kwargs)
    return info.value


def test_truncated_image_file(root):
    path = raw(root, "train-images-idx3-ubyte")
    path.write_bytes(path.read_bytes()[:-100])
    error = error_of(data.load, "mnist", root, True)
    assert error.key == "data.bad_size"
    text = str(error)
    assert str(path) in text and "truncated" in text
    assert f"ddp-tutorial data prepare --dataset mnist --root {root}" in text


def test_file_shorter_than_header(root):
    path = raw(root, "t10k-labels-idx1-ubyte")
    path.write_bytes(b"\x00\x00")
    error = error_of(data.load, "mnist", root, False)
    assert error.key == "data.too_short" and str(path) in str(error)


def test_wrong_magic(root):
    path = raw(root, "t10k-images-idx3-ubyte")
    content = bytearray(path.read_bytes())
    content[3] = 0x01  # 2049: a label file's magic in an image file
    path.write_bytes(bytes(content))
    error = error_of(data.load, "mnist", root, False)
    assert error.key == "data.bad_magic" and str(path) in str(error) and "2051" in str(error)


def test_label_image_count_mismatch(root):
    labels = raw(root, "train-labels-idx1-ubyte")
    labels.write_bytes(label_bytes(np.arange(N_TRAIN - 1) % 10))  # valid file, one label short
    error = error_of(data.load, "mnist", root, True)
    assert error.key == "data.count_mismatch"
    assert str(labels) in str(error) and str(raw(root, "train-images-idx3-ubyte")) in str(error)


def test_label_out_of_range(root):
    labels = raw(root, "train-labels-idx1-ubyte")
    labels.write_bytes(label_bytes(np.full(N_TRAIN, 10)))
    error = error_of(data.load, "mnist", root, True)
    assert error.key == "data.bad_label" and str(labels) in str(error)


def test_damaged_import_source_is_named(tmp_path, gz_dir):
    source = gz_dir / "t10k-images-idx3-ubyte.gz"
    content = gzip.decompress(source.read_bytes())
    source.write_bytes(gzip.compress(content[:-1]))  # valid gzip, truncated IDX inside
    error = error_of(data.prepare, "mnist", tmp_path / "t", from_dir=gz_dir)
    assert error.key == "data.bad_size" and str(source) in str(error)
    assert not list(data.raw_folder("mnist", tmp_path / "t").iterdir())  # nothing staged, no temp file

    source.write_bytes(source.read_bytes()[:-50])  # a cut-off .gz
    error = error_of(data.prepare, "mnist", tmp_path / "t", from_dir=gz_dir)
    assert error.key == "data.bad_gzip" and str(source) in str(error)


def test_from_dir_missing_files(tmp_path, gz_dir):
    (gz_dir / "train-labels-idx1-ubyte.gz").unlink()
    error = error_of(data.prepare, "mnist", tmp_path / "t", from_dir=gz_dir)
    assert error.key == "data.from_missing" and "train-labels-idx1-ubyte" in str(error)


# ------------------------------------------------------------------ missing data, names, languages


def test_missing_data_names_the_prepare_command(tmp_path, monkeypatch):
    root = tmp_path / "empty"
    command = f"ddp-tutorial data prepare --dataset fashion-mnist --root {root}"
    english = error_of(data.load, "fashion-mnist", root, True)
    assert english.key == "data.not_staged" and command in str(english)
    assert data.ALL_FILES[0] in str(english)

    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    turkish = error_of(data.load, "fashion-mnist", root, True)
    assert str(turkish) != str(english) and command in str(turkish)
    assert "hazır değil" in str(turkish)
    # prepare(download=False) gives the same error instead of going to the network.
    assert error_of(data.prepare, "fashion-mnist", root, download=False).key == "data.not_staged"


def test_unknown_dataset(tmp_path, monkeypatch):
    for call in (data.load, data.prepare):
        error = error_of(call, "cifar10", tmp_path)
        assert error.key == "data.unknown_dataset"
        assert "cifar10" in str(error) and "mnist, fashion-mnist" in str(error)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    assert "Geçerli adlar: mnist, fashion-mnist" in str(error_of(data.load, "cifar10", tmp_path))


def test_offline_download_fails_fast_and_clearly(tmp_path, monkeypatch):
    # Port 9 ("discard") on localhost is closed: the connection is refused at once,
    # whether or not this machine has internet.
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])
    root = tmp_path / "r"
    started = time.monotonic()
    error = error_of(data.prepare, "mnist", root)
    assert time.monotonic() - started < 10
    assert error.key == "data.offline"
    text = str(error)
    assert f"ddp-tutorial data prepare --dataset mnist --root {root} --from DIR" in text
    assert "offline" in text and "login node" in text
    assert [p.name for p in root.iterdir()] == ["MNIST"]  # the scratch download folder is gone
    assert not list(data.raw_folder("mnist", root).iterdir())

    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    turkish = str(error_of(data.prepare, "mnist", root))
    assert "giriş düğümünde" in turkish and f"--root {root} --from DİZİN" in turkish  # the Turkish placeholder


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("DDP_TUTORIAL_ROOT", raising=False)
    monkeypatch.delenv("DDP_TUTORIAL_DATASET", raising=False)
    assert datasets.default_root() == Path.home() / "ddp-data"
    assert datasets.default_dataset() == "mnist"
    monkeypatch.setenv("DDP_TUTORIAL_ROOT", str(tmp_path))
    monkeypatch.setenv("DDP_TUTORIAL_DATASET", "fashion-mnist")
    assert datasets.default_root() == tmp_path and datasets.default_dataset() == "fashion-mnist"


def test_messages_in_both_languages():
    messages = {key: texts for key, texts in catalogue().items() if key.startswith("data.")}
    assert len(messages) >= 20
    for key, texts in messages.items():
        assert texts["en"] != texts["tr"], key
        # The same placeholders in both languages.
        fields = [sorted(part.split("}")[0].split("!")[0] for part in texts[lang].split("{")[1:])
                  for lang in ("en", "tr")]
        assert fields[0] == fields[1], key


# ------------------------------------------------------------------ command line


def test_cli(tmp_path, gz_dir, monkeypatch, capsys):
    monkeypatch.setenv("DDP_TUTORIAL_DATASET", "mnist")
    parser = argparse.ArgumentParser(prog="ddp-tutorial")
    staging.add_cli(parser.add_subparsers(dest="command"))
    target = tmp_path / "cli"

    args = parser.parse_args(["data", "prepare", "--root", str(target), "--from", str(gz_dir)])
    assert (args.dataset, args.root, args.from_dir) == ("mnist", target, gz_dir)
    assert args.func(args) == 0
    assert "Staged" in capsys.readouterr().out

    args = parser.parse_args(["data", "check", "--dataset", "mnist", "--root", str(target)])
    assert args.func(args) == 0
    assert f"{N_TRAIN} train / {N_TEST} test" in capsys.readouterr().out

    with pytest.raises(SystemExit):
        parser.parse_args(["data", "prepare", "--dataset", "cifar10"])
    with pytest.raises(SystemExit):
        parser.parse_args(["data"])  # a subcommand is required
