"""``fbo witness``: the paper's own code as a witness."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from ..errors import UsageError
from .common import err, out, user_errors


def witness(
    code: str = typer.Argument(..., help="Whose code: fednest (ucr-optml/FedNest's main_hr.py)."),
    checkout: Path = typer.Option(..., help="A checkout of github.com/ucr-optml/FedNest (nothing of it is edited)."),
    settings: str = typer.Option("iid-tau1,noniid-tau5", help="Comma-separated: iid-tau1, iid-tau5, noniid-tau1, "
                                 "noniid-tau5 (Table 2's settings)."),
    seeds: str = typer.Option("0,1,2", help="Comma-separated random seeds."),
    rounds: int = typer.Option(2000, help="Communication rounds (the code's own counter)."),
    out_dir: Path = typer.Option(Path("results"), help="Results root: runs go to <out-dir>/witness/fednest-*/."),
    mnist_raw: Path = typer.Option(Path("data/MNIST/raw"), help="MNIST idx files (make setup)."),
    inner_lr: float = typer.Option(0.01, help="The lower (inner) step --lr: 0.01 in the code's reproduce/fig2.sh, "
                                   "0.003 in Xiao & Ji's App. A.3."),
) -> None:
    """The paper's own code as a witness: run the public FedNest code at Table 2's settings and record its
    curves as runs beside ours (fbo report shows them in Table 2's section). Finished runs are kept; one run
    takes 10-45 minutes on one core, by the machine's load."""
    from ..grids.spec_checks import WITNESS_SETTINGS as SETTINGS
    from ..runs.rundir import make_dirs

    with user_errors():
        if code != "fednest":
            raise UsageError(f"witness: only 'fednest' is known, got {code!r}",
                             kind="unknown", field="code", value=code)
        if not (checkout / "main_hr.py").is_file():
            raise UsageError(f"--checkout: no main_hr.py in {checkout} (a checkout of ucr-optml/FedNest?)",
                             kind="not_found", field="--checkout", path=checkout)
        if not (mnist_raw / "train-images-idx3-ubyte").is_file():
            raise UsageError(f"--mnist-raw: no MNIST idx files in {mnist_raw} (make setup, or fbo fetch mnist)",
                             kind="not_found", field="--mnist-raw", path=mnist_raw)
        names = [x.strip() for x in settings.split(",") if x.strip()]
        if bad := [x for x in names if x not in SETTINGS]:
            raise UsageError(f"--settings: unknown {bad}; choose from {', '.join(SETTINGS)}",
                             kind="unknown", field="--settings", value=bad[0])
        try:
            seed_list = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--seeds: comma-separated integers, got {seeds!r}",
                             kind="bad_value", field="--seeds", value=seeds) from None
        if not seed_list or any(not 0 <= k < 2**31 for k in seed_list) or not 10 <= rounds <= 100_000 \
                or not 0 < inner_lr < 10:
            raise UsageError("--seeds must be integers in [0, 2^31), --rounds in [10, 100000], --inner-lr in (0, 10)",
                             kind="bad_value", field="--seeds/--rounds/--inner-lr")
        make_dirs(out_dir / "witness")  # an unwritable --out-dir fails now, not after a run of 10-45 minutes
        if not os.access(out_dir / "witness", os.W_OK | os.X_OK):
            raise UsageError(f"--out-dir: cannot write into {out_dir / 'witness'}",
                             kind="unwritable", field="permission", path=out_dir / "witness")
    import torch

    torch.set_num_threads(1)
    with user_errors():
        _runs(names, seed_list, rounds, out_dir, checkout, mnist_raw, inner_lr)


def _runs(names, seed_list, rounds, out_dir, checkout, mnist_raw, inner_lr) -> None:
    from ..evidence.witness import run_name, run_public_fednest, witness_state

    for name in names:
        for k in seed_list:
            d = out_dir / "witness" / run_name(name, inner_lr, k)
            state, s, why = witness_state(d)
            if state == "tampered":
                err.print(f"{d}: tampered or damaged ({why}): it runs again", highlight=False, markup=False)
            elif s and isinstance(s.get("rounds"), int) and s["rounds"] >= rounds - 10:
                out.print(f"kept {d}: finished", highlight=False, markup=False)
                continue
            s = run_public_fednest(checkout, mnist_raw, name, k, rounds, d, inner_lr=inner_lr,
                                   echo=lambda m: typer.echo(m) if "Comm round: " in m and
                                   m.rstrip().endswith("00") else None)
            out.print(f"{d}: final test accuracy {s['final']:.4f}, rounds to 90% "
                      f"{s['rounds_to_target'] or 'never'} ({s['wall_time_s'] / 60:.1f} min)", highlight=False,
                      markup=False)
