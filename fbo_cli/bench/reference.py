"""For scale: a per-client-loop FedNest outer iteration written like the public reference code, its
evaluation, a whole FedNest run of fbo against both, and the public FedNest code itself
(``--public-fednest``)."""

from __future__ import annotations

import copy
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from .timing import _build


def prepared(checkout: Path, mnist_raw: Path, root: Path, driver: str | None = None) -> Path:
    """Copy the checkout under ``root`` beside ``data/mnist/MNIST/raw`` (a link to fbo's idx files) and the
    stubs (and ``driver``, the witness runs' ``_fbo_driver.py``, :mod:`fbo_cli.evidence.witness`); returns the
    copy's folder."""
    if not (checkout / "main_hr.py").is_file():
        raise FileNotFoundError(f"{checkout}: no main_hr.py (a checkout of github.com/ucr-optml/FedNest?)")
    if not (mnist_raw / "train-images-idx3-ubyte").is_file():
        raise FileNotFoundError(f"{mnist_raw}: no MNIST idx files (`make setup` or `fbo fetch mnist`)")
    shutil.copytree(checkout, root / "FedNest", ignore=shutil.ignore_patterns(".git", "figs", "*.ipynb"))
    (root / "data" / "mnist" / "MNIST").mkdir(parents=True)
    (root / "data" / "mnist" / "MNIST" / "raw").symlink_to(mnist_raw.resolve())
    from ..files import atomic_write

    atomic_write(root / "stubs" / "cv2.py", "log = None\n")
    atomic_write(root / "stubs" / "importlib_metadata.py", "requires = None\n")
    if driver is not None:
        atomic_write(root / "FedNest" / "_fbo_driver.py", driver)
    return root / "FedNest"


def whole_run_fednest(case: dict, data, rounds: int = 500, reps: int = 2) -> dict:
    """Seconds of a whole FedNest run (IID, tau = 1, 100 clients, C = 0.1: 10 rounds per outer iteration)
    at each tool's evaluation cadence: fbo evaluates the test set after every outer iteration (as the
    Table 2 specs do) and the public code evaluates test *and* training accuracy after every outer
    iteration (``test_img`` over the test set and the training set). Ours is measured whole (every step
    and every evaluation); the public code's is its per-client-loop iteration (:func:`loop_fednest_iteration`)
    and its evaluation (:func:`loop_fednest_eval`) measured once each and multiplied by the count. Ours is
    the faster of ``reps`` whole runs, as the public code's iteration is the fastest of its intervals."""
    iters = rounds // 10
    b = _build({**case, "set": {**case["set"], "eval": "test"}}, "cpu", True)
    algo = b.algo
    algo.step()
    algo.evaluate()  # warm-up
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        algo.evaluate()
        for _ in range(iters):
            algo.step()
            algo.evaluate()
        runs.append(time.perf_counter() - t0)
    ours = min(runs)
    loop_fednest_iteration(data)
    it = min(loop_fednest_iteration(data, gen=torch.Generator().manual_seed(k)) for k in range(2))
    ev = min(loop_fednest_eval(data) for _ in range(2))
    ref = iters * it + (iters + 1) * ev
    return {"rounds": rounds, "iterations": iters, "ours_s": ours, "ours_runs_s": runs, "ref_iteration_s": it,
            "ref_eval_s": ev, "ref_s": ref, "ratio": ref / ours}



PUBLIC_ARGS = ["--hlr", "0.01", "--lr", "0.01", "--outer_tau", "1", "--round", "10000000", "--local_bs", "64",
               "--iid", "--gpu", "-1"]  # reproduce/fig2.sh, FedNest, tau = 1, IID (the whole-run line's setting)


def public_fednest(checkout: Path, mnist_raw: Path, iters: int = 4, timeout: float = 3600) -> dict:
    """Seconds per outer iteration of the public FedNest code (``main_hr.py`` of mc-nya/FedNest, the code
    FBO-AggITD's experiments build on) at the whole-run line's setting: MNIST, IID, 100 clients, C = 0.1,
    tau = 1, local batch 64 (its ``reproduce/fig2.sh``), one CPU thread. Timed between its own
    per-iteration prints, each after the iteration's training and its ``test_img`` of the test and the
    training set, so start-up and data loading are left out; the minimum over ``iters - 1`` intervals.
    The checkout is copied to a temporary folder beside a link to fbo's MNIST idx files (the code reads
    ``../data/mnist/``); two imports it never uses (``cv2.log``, ``importlib_metadata.requires``) are
    stubbed on its path. Nothing of the code is edited."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cwd = prepared(checkout, mnist_raw, root)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONPATH": str(root / "stubs")}
        cmd = [sys.executable, "-u", "main_hr.py", *PUBLIC_ARGS, "--epochs", str(iters),
               "--output", str(root / "log.yaml")]
        stamps, t0 = [], time.perf_counter()
        with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                if "Comm round:" in line:
                    stamps.append(time.perf_counter())
                if time.perf_counter() - t0 > timeout:
                    proc.kill()
                    break
        if proc.returncode or len(stamps) < 2:
            raise RuntimeError(f"the public FedNest code stopped after {len(stamps)} outer iteration(s), "
                               f"exit code {proc.returncode}")
    per = min(b - a for a, b in zip(stamps, stamps[1:]))
    return {"public_iteration_s": per, "public_startup_s": stamps[0] - t0 - per, "public_iters": len(stamps)}


class _MLP(torch.nn.Module):
    def __init__(self, d=784, h=200, c=10):
        super().__init__()
        self.fc1, self.drop, self.head = torch.nn.Linear(d, h), torch.nn.Dropout(0.5), torch.nn.Linear(h, c)

    def forward(self, X):
        return self.head(torch.relu(self.drop(self.fc1(X.flatten(1)))))


def loop_fednest_eval(data, bs: int = 128) -> float:
    """The public FedNest code's evaluation after an outer iteration, for scale: ``test_img`` (a
    ``DataLoader`` of batch ``bs`` through the ``nn.Module``, loss summed and argmax counted per batch) on
    the test set and on the training set; returns seconds."""
    net = _MLP(data.X[0].numel()).eval()
    F = torch.nn.functional
    t0 = time.perf_counter()
    with torch.no_grad():
        for X, y in ((data.X_test, data.y_test), (data.X, data.y)):
            loss, right = 0.0, 0
            for i in range(0, len(X), bs):
                out = net(X[i:i + bs])
                loss += F.cross_entropy(out, y[i:i + bs], reduction="sum").item()
                right += int((out.argmax(1) == y[i:i + bs]).sum())
    return time.perf_counter() - t0


def loop_fednest_iteration(data, participation=0.1, epochs=5, bs=64, T=5, lam=0.01, lr_in=0.003, lr_out=0.01,
                           reg=0.01, gen=None) -> float:
    """One FedNest outer iteration (N = 1, tau = 1) with a Python loop over clients; returns seconds."""
    gen = gen or torch.Generator().manual_seed(0)
    net = _MLP(data.X[0].numel())
    F = torch.nn.functional
    m = data.num_clients
    t0 = time.perf_counter()

    def clients():
        return torch.randperm(m, generator=gen)[:max(1, int(participation * m))].tolist()

    def rows(i, which):
        idx, mask = (data.train_idx, data.train_mask) if which == "train" else (data.val_idx, data.val_mask)
        return idx[i][mask[i]]

    def g_loss(model, X, y):
        return F.cross_entropy(model(X), y) + 0.5 * reg * sum((p * p).sum() for p in model.head.parameters())

    head = list(net.head.parameters())
    # FedInn (SVRG): anchor round, then local steps per client, then model averaging
    S = clients()
    anchors = []
    for i in S:
        r = rows(i, "train")
        anchors.append(torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head))
    q = [sum(a[k] for a in anchors) / len(S) for k in range(len(head))]
    new_heads = []
    for i in S:
        local = copy.deepcopy(net)
        lh = list(local.head.parameters())
        r = rows(i, "train")
        for _ in range(epochs):
            perm = r[torch.randperm(len(r), generator=gen)]
            for s in range(0, len(perm), bs):
                b = perm[s:s + bs]
                g1 = torch.autograd.grad(g_loss(local, data.X[b], data.y[b]), lh)
                g0 = torch.autograd.grad(g_loss(net, data.X[b], data.y[b]), head)
                with torch.no_grad():
                    for p, a, c, qq in zip(lh, g1, g0, q):
                        p -= lr_in * (a - c + qq)
        new_heads.append([p.detach().clone() for p in lh])
    with torch.no_grad():
        for k, p in enumerate(head):
            p.copy_(sum(h[k] for h in new_heads) / len(S))
    # FedIHGP and FedOut
    S = clients()
    v = None
    for i in S:
        r = rows(i, "val")
        gi = torch.autograd.grad(F.cross_entropy(net(data.X[r]), data.y[r]), head)
        v = gi if v is None else [a + b for a, b in zip(v, gi)]
    p = [a / len(S) for a in v]
    acc = [a.clone() for a in p]
    for _ in range(T):
        hv = None
        for i in S:
            r = rows(i, "train")
            gr = torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head, create_graph=True)
            hvi = torch.autograd.grad(sum((a * b).sum() for a, b in zip(gr, p)), head)
            hv = hvi if hv is None else [a + b for a, b in zip(hv, hvi)]
        p = [a - lam * b / len(S) for a, b in zip(p, hv)]
        acc = [a + b for a, b in zip(acc, p)]
    body = [net.fc1.weight, net.fc1.bias]
    hs = []
    for i in S:
        r, rv = rows(i, "train"), rows(i, "val")
        direct = torch.autograd.grad(F.cross_entropy(net(data.X[rv]), data.y[rv]), body)
        gr = torch.autograd.grad(g_loss(net, data.X[r], data.y[r]), head, create_graph=True)
        ind = torch.autograd.grad(sum((a * lam * b).sum() for a, b in zip(gr, acc)), body)
        hs.append([d - c for d, c in zip(direct, ind)])
    new = []
    for _ in S:
        local = copy.deepcopy(net)
        with torch.no_grad():
            for prm, k in zip([local.fc1.weight, local.fc1.bias], range(2)):
                prm -= lr_out * sum(h[k] for h in hs) / len(S)
        new.append([local.fc1.weight.detach().clone(), local.fc1.bias.detach().clone()])
    with torch.no_grad():
        for k, prm in enumerate(body):
            prm.copy_(sum(n[k] for n in new) / len(S))
    return time.perf_counter() - t0
