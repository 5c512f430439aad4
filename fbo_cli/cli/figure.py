"""``fbo figure``: the papers' figures from run directories (the committed evidence by default), one
command per figure (:data:`fbo_cli.evidence.report.figures.FIGURES`), plus the two that build their data first
(``zohfl-fig1 DATASET``: the label split; ``codasca-imax DIR``: the I_max table)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..errors import UsageError
from ..evidence.paper_figures import FIGURES
from .common import user_errors

figure_app = typer.Typer(no_args_is_help=True, help="The papers' figures in their layouts, from run directories "
                         "(default: the committed evidence docs/results/), as PNG, PDF and SVG: " +
                         ", ".join(f.name for f in FIGURES) + "; and codasca-imax (the I_max table).")

FROM = typer.Option(Path("docs/results"), "--from", help="Results root to read (run directories); docs/results "
                    "is the committed evidence.")
OUT = typer.Option(Path("results/figures"), "--out", help="Folder the figure is written to (NAME.png, .pdf, .svg).")
FORMAT = typer.Option(None, "--format", help="Output formats: png, pdf, svg (repeatable or a comma list). "
                      "\\[default: all three]")


out = Console()


def _out_folder(out_dir: Path) -> None:
    """``--out`` made (or found) as a writable folder: a regular file or an unwritable place is bad input."""
    import os

    from ..runs.rundir import make_dirs

    try:
        make_dirs(out_dir)
    except UsageError as e:
        raise e.reworded(f"--out: {e}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--out: cannot write into {out_dir}", kind="unwritable", field="permission", path=out_dir)


def _draw(name: str, root: Path, out_dir: Path, formats: list[str] | None) -> None:
    from ..evidence.report.figures import draw
    from ..grids.plots import parse_formats

    with user_errors():
        fmts = parse_formats(formats)
        if not root.is_dir():
            raise UsageError(f"--from: no results folder at {root}", kind="not_found", field="--from", path=root)
        _out_folder(out_dir)
        files, caption = draw(name, root, out_dir, fmts)
    out.print(f"written: {', '.join(str(f) for f in files)}", highlight=False, markup=False)
    out.print(caption, highlight=False, markup=False)


def _command(fig):
    def command(root: Path = FROM, out_dir: Path = OUT, formats: Optional[list[str]] = FORMAT) -> None:
        _draw(fig.name, root, out_dir, formats)

    command.__doc__ = f"{fig.title} (from {', '.join(fig.specs) or 'the counts tables under figures/'})."
    return command


for _fig in FIGURES:
    if _fig.name != "zohfl-fig1":
        figure_app.command(_fig.name)(_command(_fig))


@figure_app.command("zohfl-fig1")
def figure_zohfl_fig1(
    dataset: Optional[str] = typer.Argument(None, help="Build the split of this dataset from the data first "
                                            "(writes its counts CSV and bubble chart into --out). \\[default: draw "
                                            "Fig. 1 from the counts tables under --from/figures/]"),
    alpha: float = typer.Option(0.1, help="Dirichlet concentration of the label split (with DATASET)."),
    clients: int = typer.Option(10, help="Number of clients (with DATASET)."),
    seed: int = typer.Option(0, help="Random seed of the split (with DATASET)."),
    data_dir: Path = typer.Option(Path("data"), help="Where datasets are read from (with DATASET)."),
    root: Path = FROM, out_dir: Path = OUT, formats: Optional[list[str]] = FORMAT,
) -> None:
    """Fig. 1 of ZO-HFL (Qiu, Kim & Yousefian, arXiv 2504.01839): examples per client and class of the
    Dirichlet split. Without DATASET: both datasets' panels from the evidence's counts tables; with it: build the
    split and write its counts as CSV (`fbo report --collect` keeps the CSV) and its bubble chart."""
    if dataset is None:
        return _draw("zohfl-fig1", root, out_dir, formats)
    from ..evidence.report.zohfl_section import fig1
    from ..grids.plots import parse_formats

    with user_errors():
        fmts = parse_formats(formats)
        if not alpha > 0 or clients < 1 or not 0 <= seed < 2**32:
            raise UsageError(f"--alpha must be > 0, --clients >= 1 and --seed in [0, 2^32), got {alpha}, {clients}, "
                             f"{seed}", kind="bad_value", field="--alpha/--clients/--seed",
                             value=(alpha, clients, seed))
        _out_folder(out_dir)
        png = fig1(dataset, alpha, clients, seed, str(data_dir), out_dir, fmts)
    out.print(f"written: {png.with_suffix('')}.{{{','.join(fmts)}}} and its .csv", highlight=False, markup=False)


@figure_app.command("codasca-imax")
def figure_codasca_imax(
    compare_dir: Path = typer.Argument(..., help="Output folder of `fbo compare experiments/codasca_fig1_*.yaml`."),
    delta: float = typer.Option(0.01, help="AUC drop from I = 1 that a window may cost."),
) -> None:
    """The CODASCA Figure 1 analog's I_max table (Yuan et al., ICML 2021): final AUC against the window I per
    algorithm and K, and I_max; writes imax.md, imax.csv and imax.png (.pdf, .svg) beside runs.csv and prints
    the table. The whole Figure 1 from the evidence: `fbo figure codasca-fig1`."""
    from ..evidence.report.codasca_section import imax_table

    with user_errors():
        if not (compare_dir / "runs.csv").is_file():
            raise UsageError(f"no runs.csv in {compare_dir}: run `fbo compare` on a codasca_fig1 spec first",
                             kind="not_found", path=compare_dir)
        imax_table(compare_dir, delta)
        typer.echo((compare_dir / "imax.md").read_text().rstrip("\n"))
