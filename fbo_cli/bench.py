"""``make bench``: cost per outer iteration and per communication round of every algorithm.

Cases: the seed-003 setting (MNIST-size MLP, 100 clients, participation 0.1 and 1.0) for
``fednest`` and ``aggitd``, on Fashion-MNIST (same shapes as MNIST, works offline), plus every case
listed in ``experiments/bench.yaml``. Each case is timed over ``iters`` outer iterations after one
warm-up iteration; evaluation is timed separately. For scale, the same run also times a
*per-client-loop* FedNest outer iteration written the way the public FedNest code is structured
(a model copy per client, a Python loop over clients, autograd one client at a time), on the same
data, so that the speed-up of the vectorized simulator is a ratio measured in one run.

Writes ``results/bench/bench.csv`` and ``bench.md``. Usage: ``python -m fbo_cli.bench [--quick]
[--threads N] [--only SUBSTRINGS]``. Timings use one thread by default.
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import yaml

from .config import resolve
from .results import atomic_write
from .runner import build

SPINE = [
    {"name": f"{a}-mlp-fmnist-m100-C{c}", "task": "hyperrep", "algo": a,
     "set": {"dataset": "fashion-mnist", "clients": 100, "participation": c, "partition": "iid"}}
    for a in ("fednest", "aggitd") for c in (0.1, 1.0)
]


def time_case(case: dict, iters: int) -> dict:
    b = build(resolve(case["task"], case["algo"], {**(case.get("set") or {}), "threads": None}))
    algo, led = b.algo, b.ledger
    algo.step()  # warm-up
    r0, t0 = led.rounds, time.perf_counter()
    for _ in range(iters):
        algo.step()
    dt = (time.perf_counter() - t0) / iters
    rounds = (led.rounds - r0) / iters
    t0 = time.perf_counter()
    algo.evaluate()
    ev = time.perf_counter() - t0
    return {"case": case["name"], "task": case["task"], "algo": case["algo"], "s_per_iteration": dt,
            "rounds_per_iteration": rounds, "s_per_round": dt / max(rounds, 1e-9), "eval_s": ev}


# --------------------------------------------------------------------------------------------------
# A per-client-loop FedNest outer iteration, structured like the public reference code, for scale.


class _MLP(torch.nn.Module):
    def __init__(self, d=784, h=200, c=10):
        super().__init__()
        self.fc1, self.drop, self.head = torch.nn.Linear(d, h), torch.nn.Dropout(0.5), torch.nn.Linear(h, c)

    def forward(self, X):
        return self.head(torch.relu(self.drop(self.fc1(X.flatten(1)))))


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=3, help="timed outer iterations per case")
    ap.add_argument("--quick", action="store_true", help="only the seed-003 cases at participation 0.1")
    ap.add_argument("--cases", default="experiments/bench.yaml")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: one core per run, as `compare --jobs 2` uses on 2 cores; "
                         "more threads on a loaded machine oversubscribe and time noise)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 132)
    cases = list(SPINE)
    if not args.quick and Path(args.cases).is_file():
        cases += (yaml.safe_load(Path(args.cases).read_text()) or {}).get("cases") or []
    if args.quick:
        cases = [c for c in cases if c["set"]["participation"] == 0.1]
    if args.only:
        keys = args.only.split(",")
        cases = [c for c in cases if any(k in c["name"] for k in keys)]
    rows = []
    for c in cases:
        con.print(f"timing {c['name']} ...", style="dim")
        try:
            rows.append(time_case(c, args.iters))
        except Exception as e:  # a missing dataset or a broken case must not hide the others
            con.print(f"[red]skipped {c['name']}: {e}[/red]")
    if any(c["name"].startswith("fednest-mlp-fmnist-m100-C0.1") for c in cases):
        data = build(resolve("hyperrep", "fednest", SPINE[0]["set"])).task.data
        loop_fednest_iteration(data)  # warm-up
        t = sum(loop_fednest_iteration(data, gen=torch.Generator().manual_seed(k)) for k in range(2)) / 2
        rows.append({"case": "fednest-per-client-loop-reference-C0.1", "task": "hyperrep", "algo": "fednest",
                     "s_per_iteration": t, "rounds_per_iteration": 10, "s_per_round": t / 10, "eval_s": float("nan")})
    df = pd.DataFrame(rows)
    t = Table(title=f"fbo bench: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
                    f"{torch.get_num_threads()} threads")
    for col in ("case", "s / iteration", "rounds / iteration", "s / round", "eval s"):
        t.add_column(col, justify="left" if col == "case" else "right", no_wrap=True)
    for _, r in df.iterrows():
        t.add_row(r.case, f"{r.s_per_iteration:.3f}", f"{r.rounds_per_iteration:g}", f"{r.s_per_round:.4f}",
                  f"{r.eval_s:.3f}")
    con.print(t)
    notes = []
    get = lambda name: df.loc[df.case == name, "s_per_iteration"]
    a, b, ref = get("fednest-mlp-fmnist-m100-C0.1"), get("fednest-mlp-fmnist-m100-C1.0"), \
        get("fednest-per-client-loop-reference-C0.1")
    if len(a) and len(ref):
        notes.append(f"FedNest, C = 0.1: per-client-loop reference / vectorized = {ref.iloc[0] / a.iloc[0]:.1f}x")
    if len(a) and len(b):
        notes.append(f"FedNest: full participation / C = 0.1 = {b.iloc[0] / a.iloc[0]:.1f}x (10x the clients)")
    a2, b2 = get("aggitd-mlp-fmnist-m100-C0.1"), get("aggitd-mlp-fmnist-m100-C1.0")
    if len(a2) and len(b2):
        notes.append(f"FBO-AggITD: full participation / C = 0.1 = {b2.iloc[0] / a2.iloc[0]:.1f}x")
    for n in notes:
        con.print(n)
    out = Path(args.out)
    atomic_write(out / "bench.csv", df.to_csv(index=False))
    md = ["| case | s / iteration | rounds / iteration | s / round | eval s |", "|---|---|---|---|---|"]
    md += [f"| {r.case} | {r.s_per_iteration:.3f} | {r.rounds_per_iteration:g} | {r.s_per_round:.4f} | "
           f"{r.eval_s:.3f} |" for _, r in df.iterrows()]
    atomic_write(out / "bench.md", "\n".join(md + [""] + notes) + "\n")
    con.print(f"written: {out}/bench.csv, bench.md")


if __name__ == "__main__":
    main()
