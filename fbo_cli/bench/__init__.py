"""``make bench``: cost per outer iteration of every algorithm, measured against the machine.

For each case: seconds per outer iteration (min over ``iters`` timed iterations after a warm-up, more
for a cheap case, up to ``--min-seconds``) and
per communication round, the FLOPs of one iteration (``torch.utils.flop_counter.FlopCounterMode`` on the
second iteration: a first one may do more, as FedBiOAcc's and AdaFBiO's first estimators do; where an
iteration's work grows over a run (``Algorithm.work_grows``: ``hfl``'s ``ceil(tau sqrt(r + 1))`` local steps)
every timed iteration is the same one, the third, each of a fresh build, and its FLOPs are counted there),
the achieved GFLOP/s, and the **efficiency**: achieved GFLOP/s over the
machine's own sgemm rate (``torch.matmul`` of two 2048² fp32 matrices, same thread count), measured
between the case's own timed iterations (best of those), so that the ratio is stable on a noisy
machine whose load drifts during the run. Cases whose task has a fast path
(``fast``: hyperrep and auc with the mlp, hyperclean) are also timed with ``fast=false`` (the generic
``torch.func`` path), alternating fast and generic iterations in one process: ``speedup`` is their
ratio. Peak memory: on the CPU each case runs in a forked process and reports its peak RSS above the
RSS it started with (``/proc/self/clear_refs``, ``VmHWM``), for the fast path; on CUDA
``torch.cuda.max_memory_allocated``.

Cases, all in ``experiments/bench.yaml`` (:mod:`fbo_cli.bench.cases`): the setting of Xiao & Ji (ICML
2023) (MNIST-size MLP on Fashion-MNIST, 100 clients, iid, participation 0.1 and 1.0) for ``fednest`` and
``aggitd`` (``quick: true``: the cases of ``--quick``), a case per algorithm, and two growth sweeps of
FedNest (fast path): participating clients 10, 20, 50, 100 (of 100), and total clients
100, 1,000, 10,000 at C = 0.01 (the same 60,000 examples dealt out, so the participating clients
hold 600 examples in all; ``sample+gather`` times drawing the clients and gathering their splits).
For scale, a per-client-loop FedNest iteration written like the public FedNest code, and a whole
FedNest run (500 rounds, IID, tau = 1, C = 0.1) at each tool's evaluation cadence: fbo measured whole,
the loop reference as its iteration and its evaluation (test and training sets, as the public code
does after every outer iteration) times their counts. Evaluation: ``eval s`` with the task's default
metrics, ``eval s, test only`` with the test set alone (hyperrep's ``eval: test``, what a spec's
compared runs need), and ``eval / iteration`` (the cheaper of the two over an outer iteration).

Writes ``results/bench/bench.csv``, ``growth.csv`` and ``bench.md`` (in ``results/bench/cuda/`` with
``--device cuda``). Usage: ``fbo bench [--quick] [--device cpu|cuda] [--threads N]
[--only SUBSTRINGS] [--profile]`` (:func:`main` takes :class:`BenchOptions`). ``--profile``
(:mod:`fbo_cli.bench.profiling`) writes ``profile.md`` instead of the bench: for each case of
the list ``profile`` (FedNest and FBO-AggITD in Xiao & Ji's ICML 2023 setting at C = 0.1, FedBiO and FedAvg on
hyper-cleaning, CODASCA on synth-c100, ZO-HFL) the split of an outer iteration into sampling, oracles and
the rest (``phases``: plain timers, no profiler), then the ``torch.profiler`` table (self time by operator
and input shapes) of one outer iteration. ``--against`` (:mod:`fbo_cli.bench.ab`): before and after.
Timing: :mod:`fbo_cli.bench.timing`; the loop reference and the public code: :mod:`fbo_cli.bench.reference`.
"""


from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..errors import UsageError
from ..runs.config import resolve
from ..runs.rundir import atomic_write
from ..runs.runner import build
from .ab import ab_bench, commit_label, is_revision  # noqa: F401  (the CLI checks --against with it)
from .cases import load_cases
from .profiling import floor_ms, phases, profile_case  # noqa: F401  (the bench's public API)
from .reference import PUBLIC_ARGS, loop_fednest_iteration, public_fednest, whole_run_fednest  # noqa: F401
from .timing import _build, _flops, growth_case, isolated, sgemm_rate, time_case  # noqa: F401


@dataclass(frozen=True)
class BenchOptions:
    """What ``fbo bench`` measures and where it writes (its options; checked when made)."""

    quick: bool = False  # the cases marked quick and the growth sweeps only, 2 iterations
    only: str = ""  # comma-separated substrings of case names
    device: str = "cpu"  # cpu | cuda
    threads: int = 1  # torch CPU threads (1: one core per run, as compare --jobs 2 uses on 2 cores)
    iters: int = 3  # timed outer iterations per case and path (the minimum is kept)
    min_seconds: float = 4.0  # keep timing a case (up to 4x iters) this many seconds
    cases: str = "experiments/bench.yaml"
    out: str | None = None  # default: results/bench, results/bench/cuda for cuda
    profile: bool = False  # instead of the bench: profile.md
    public_fednest: str = ""  # a checkout of github.com/mc-nya/FedNest
    mnist_raw: str = "data/MNIST/raw"  # MNIST idx files for public_fednest
    against: str = ""  # a git revision or a checkout: before and after instead of the bench
    rounds: int = 3  # alternating rounds of against

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda") or self.threads < 1 or self.iters < 1:
            raise UsageError(f"--device must be cpu or cuda, --threads and --iters >= 1; got {self.device}, "
                             f"{self.threads}, {self.iters}", kind="bad_value",
                             field="--device" if self.device not in ("cpu", "cuda") else
                             "--threads" if self.threads < 1 else "--iters",
                             value=(self.device, self.threads, self.iters))
        if not Path(self.cases).is_file():
            raise UsageError(f"--cases: no file at {self.cases}", kind="not_found", field="--cases", path=self.cases)
        load_cases(Path(self.cases))  # a malformed file is bad input before anything runs
        if self.against and not (Path(self.against) / "fbo_cli").is_dir() and not is_revision(self.against):
            raise UsageError(f"--against: {self.against} is neither a checkout with fbo_cli/ nor a git revision here",
                             kind="not_found", field="--against", value=self.against)
        if self.rounds < 1:
            raise UsageError(f"--rounds must be >= 1; got {self.rounds}", kind="bad_value", field="--rounds",
                             value=self.rounds)
        if self.public_fednest and not (Path(self.public_fednest) / "main_hr.py").is_file():
            raise UsageError(f"--public-fednest: no main_hr.py in {self.public_fednest} (a checkout of "
                             "mc-nya/FedNest?)", kind="not_found", field="--public-fednest", path=self.public_fednest)


def main(o: BenchOptions) -> None:
    """Run the bench (or its profile, or before and after) as ``o`` says; writes under ``o.out``."""
    torch.set_num_threads(o.threads)
    # a GPU bench sits beside the CPU one (the report shows both)
    out = Path(o.out or ("results/bench/cuda" if o.device == "cuda" else "results/bench"))
    iters = 2 if o.quick and o.iters == 3 else o.iters
    book = load_cases(Path(o.cases))

    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 160)
    dev = torch.device(o.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        con.print("[red]--device cuda: no CUDA device available[/red]")
        raise SystemExit(2)
    if o.against:
        try:
            ab = ab_bench(o.against, o.only.split(",") if o.only else list(book.ab), o.rounds,
                          o.threads, out, con)
        except (ValueError, RuntimeError) as e:
            con.print(f"[red]{e}[/red]")
            raise SystemExit(2 if isinstance(e, ValueError) else 1) from None
        for r in ab.itertuples():
            con.print(f"{r.case}: {r.before_s:.4f} -> {r.after_s:.4f} s / iteration ({r.speedup:.2f}x)")
        con.print(f"written: {out}/ab.md, ab.csv")
        return
    cases, growth = [c for c in book.cases if c.get("quick") or not o.quick], list(book.growth)
    if o.profile:
        every = book.cases
        md = [f"# fbo bench --profile: torch {torch.__version__}, {dev.type}, {o.threads} thread(s)", ""]
        for name in book.profile:
            c = next((c for c in every if c["name"] == name), None)
            if c is None or (o.only and not any(k in name for k in o.only.split(","))):
                continue
            con.print(f"profiling {name} ...", style="dim")
            try:
                md.append(isolated(profile_case, (c, o.device), o.device, o.threads))
            except Exception as e:
                con.print(f"[red]skipped {name}: {e}[/red]")
        atomic_write(out / "profile.md", "\n".join(md) + "\n")
        con.print(f"written: {out}/profile.md")
        return
    if o.only:
        keys = o.only.split(",")
        cases = [c for c in cases if any(k in c["name"] for k in keys)]
        growth = [c for c in growth if any(k in c["name"] for k in keys)]
    ref = book.reference  # FedNest in Xiao & Ji's setting at C = 0.1: the loop reference's case
    _build(ref, o.device, True)  # load Fashion-MNIST once; forked cases inherit the cache
    sgemm = sgemm_rate(dev)
    con.print(f"sgemm (2048² fp32, {o.threads} thread(s), {dev.type}): {sgemm:.1f} GFLOP/s", style="dim")
    rows, grows, whole = [], [], None
    for c in cases:
        con.print(f"timing {c['name']} ...", style="dim")
        try:
            rows.append(isolated(time_case, (c, iters, o.device, True, o.min_seconds), o.device,
                                 o.threads))
        except Exception as e:  # a missing dataset or a broken case must not hide the others
            con.print(f"[red]skipped {c['name']}: {e}[/red]")
    for c in growth:
        con.print(f"timing {c['name']} ...", style="dim")
        try:
            grows.append(isolated(growth_case, (c, iters, o.device), o.device, o.threads))
        except Exception as e:
            con.print(f"[red]skipped {c['name']}: {e}[/red]")
    if not o.quick and dev.type == "cpu" and any(c["name"] == ref["name"] for c in cases):
        data = build(resolve(ref["task"], ref["algo"], ref["set"])).task.data
        loop_fednest_iteration(data)  # warm-up
        t = min(loop_fednest_iteration(data, gen=torch.Generator().manual_seed(k)) for k in range(2))
        rows.append({"case": "fednest-per-client-loop-reference-C0.1", "task": "hyperrep", "algo": "fednest",
                     "device": "cpu", "s_per_iteration": t, "rounds_per_iteration": 10, "s_per_round": t / 10})
        con.print("timing a whole FedNest run (500 rounds) and the per-client-loop reference's ...", style="dim")
        whole = whole_run_fednest(ref, data)
        if o.public_fednest:
            con.print(f"timing the public FedNest code in {o.public_fednest} ...", style="dim")
            try:
                whole.update(public_fednest(Path(o.public_fednest), Path(o.mnist_raw)))
            except (OSError, RuntimeError) as e:
                con.print(f"[red]the public FedNest code: {e}[/red]")
    sgemm = max(sgemm, sgemm_rate(dev))  # again at the end: the better of the two
    df, gf = pd.DataFrame(rows), pd.DataFrame(grows)
    for frame in (df, gf):  # each case against the sgemm rate measured between its own iterations
        if len(frame):
            if "sgemm_gflops" not in frame:
                frame["sgemm_gflops"] = float("nan")
            frame["sgemm_gflops"] = frame["sgemm_gflops"].fillna(sgemm)
            frame["efficiency"] = frame["gflops"] / frame["sgemm_gflops"]
    if len(gf):
        for _, g in gf.groupby("sweep"):
            gf.loc[g.index, "vs_first"] = g["s_per_iteration"] / g["s_per_iteration"].iloc[0]
    title = (f"fbo bench: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{dev.type}{f' ({torch.cuda.get_device_name(dev)})' if dev.type == 'cuda' else ''}, "
             f"{torch.get_num_threads()} thread(s), sgemm {sgemm:.1f} GFLOP/s{commit_label()}")
    md = [f"**{title}**", ""]
    cols = [("case", "case", "{}"), ("s / iteration", "s_per_iteration", "{:.3f}"),
            ("rounds", "rounds_per_iteration", "{:g}"), ("s / round", "s_per_round", "{:.4f}"),
            ("GFLOP", "gflop", "{:.2f}"), ("GFLOP/s", "gflops", "{:.1f}"), ("sgemm GFLOP/s", "sgemm_gflops", "{:.1f}"),
            ("efficiency", "efficiency", "{:.0%}"),
            ("generic s", "generic_s", "{:.3f}"), ("generic GFLOP", "generic_gflop", "{:.2f}"),
            ("fast / generic", "speedup", "{:.2f}x"), ("peak MB", "peak_mb", "{:.0f}"), ("eval s", "eval_s", "{:.3f}"),
            ("eval s, test only", "eval_test_s", "{:.3f}"), ("eval / iteration", "eval_per_iteration", "{:.2f}")]
    gcols = [("sweep", "sweep", "{}"), ("clients", "clients", "{}"), ("participating", "participating", "{}"),
             ("examples / client", "examples_per_client", "{}"), ("s / iteration", "s_per_iteration", "{:.3f}"),
             ("vs first", "vs_first", "{:.2f}x"), ("s / participant", "s_per_participant", "{:.4f}"),
             ("GFLOP", "gflop", "{:.2f}"), ("efficiency", "efficiency", "{:.0%}"),
             ("sample+gather ms", "sample_gather_ms", "{:.2f}"), ("build s", "build_s", "{:.2f}")]
    for frame, spec, name in ((df, cols, title), (gf, gcols, "growth (FedNest, fast path)")):
        if not len(frame):
            continue
        t = Table(title=name)
        for head, _, _ in spec:
            t.add_column(head, justify="left" if head in ("case", "sweep") else "right", no_wrap=True)
        fmt = lambda r, spec=spec: [("" if pd.isna(r.get(k)) else f.format(r[k])) for _, k, f in spec]
        for _, r in frame.iterrows():
            t.add_row(*fmt(r))
        con.print(t)
        md += ["| " + " | ".join(h for h, _, _ in spec) + " |", "|" + "---|" * len(spec)]
        md += ["| " + " | ".join(fmt(r)) + " |" for _, r in frame.iterrows()] + [""]
    notes = []
    get = lambda name, col="s_per_iteration": df.loc[df.case == name, col] if len(df) else pd.Series(dtype=float)
    for a, label in (("fednest", "FedNest"), ("aggitd", "FBO-AggITD")):
        for c in ("0.1", "1.0"):
            r = get(f"{a}-mlp-fmnist-m100-C{c}", "speedup")
            e = get(f"{a}-mlp-fmnist-m100-C{c}", "efficiency")
            if len(r):
                notes.append(f"{label}, C = {c}: fast path {r.iloc[0]:.2f}x the generic path, "
                             f"{e.iloc[0]:.0%} of sgemm")
    a, ref = get("fednest-mlp-fmnist-m100-C0.1"), get("fednest-per-client-loop-reference-C0.1")
    if len(a) and len(ref):
        notes.append(f"FedNest, C = 0.1: per-client-loop reference / vectorized = {ref.iloc[0] / a.iloc[0]:.1f}x")
    if whole:
        notes.append(f"FedNest, a whole run (IID, tau = 1, 100 clients, C = 0.1, {whole['rounds']} rounds, "
                     f"{whole['iterations']} outer iterations, each tool evaluating after every one): fbo "
                     f"{whole['ours_s']:.2f} s (test set; the faster of {len(whole['ours_runs_s'])} whole runs: "
                     f"{', '.join(f'{t:.2f}' for t in whole['ours_runs_s'])} s); the per-client-loop reference "
                     f"{whole['ref_s']:.1f} s "
                     f"({whole['ref_iteration_s']:.3f} s per iteration, {whole['ref_eval_s']:.3f} s per evaluation of "
                     f"the test and training sets, as the public code does) = {whole['ratio']:.1f}x")
        if "public_iteration_s" in whole:
            pub = whole["public_iteration_s"] * whole["iterations"]
            notes.append(f"FedNest, the same whole run in the public FedNest code (mc-nya/FedNest main_hr.py, MNIST, "
                         f"{' '.join(PUBLIC_ARGS)}, 1 thread): {whole['public_iteration_s']:.2f} s per outer iteration "
                         f"with its evaluation (test and training sets), {pub:.0f} s for {whole['iterations']} "
                         f"(start-up and data loading, {whole['public_startup_s']:.0f} s, left out) = "
                         f"{pub / whole['ours_s']:.0f}x fbo's whole run")
    for n in notes:
        con.print(n)
    atomic_write(out / "bench.csv", df.to_csv(index=False))
    atomic_write(out / "growth.csv", gf.to_csv(index=False))
    atomic_write(out / "bench.md", "\n".join(md + notes) + "\n")
    con.print(f"written: {out}/bench.csv, growth.csv, bench.md")

