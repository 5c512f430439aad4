"""The papers' figures that ``fbo figure NAME`` and ``fbo report`` draw: a light registry (no plotting
imports), so that the command line lists them quickly; :mod:`fbo_cli.evidence.report.figures` draws them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFigure:
    name: str
    paper: str  # the report's paper key
    title: str
    specs: tuple[str, ...]
    kind: str = "curves"  # curves | codasca | dots | noise | partition


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("aggitd-fig2", "aggitd", "FBO-AggITD Table 2 / Fig. 2: test accuracy against communication rounds "
                "(MNIST MLP), the four settings, the 90% target", ("experiments/aggitd_table2.yaml",)),
    PaperFigure("aggitd-fig3", "aggitd", "FBO-AggITD Fig. 3: FBO-AggITD, FedNest and LFedNest, MNIST MLP, non-IID, "
                "tau = 1", ("experiments/aggitd_fig3_mnist.yaml",)),
    PaperFigure("aggitd-fig4", "aggitd", "FBO-AggITD Fig. 4: the SGD-type lower solver (FedAvg), MNIST MLP",
                ("experiments/aggitd_fig4_mnist.yaml",)),
    PaperFigure("aggitd-fig6", "aggitd", "FBO-AggITD Fig. 6: training accuracy on MNIST with the CNN",
                ("experiments/aggitd_fig6_mnist_cnn.yaml",)),
    PaperFigure("fedbio-noise", "fedbio", "FedBiO hyper-cleaning: final test accuracy against the noise rate p",
                ("experiments/fedbio_hyperclean_mnist.yaml", "experiments/fedbio_hyperclean_fmnist.yaml"), "noise"),
    PaperFigure("adafbio-noise", "adafbio", "AdaFBiO hyper-cleaning: final test accuracy against the noise rate p",
                ("experiments/adafbio_hyperclean_mnist.yaml", "experiments/adafbio_hyperclean.yaml"), "noise"),
    PaperFigure("codasca-fig1", "codasca", "CODASCA Fig. 1 analog (synth-c100): test AUC against iterations per K, "
                "a line per window I; final AUC against I with I_max", ("experiments/codasca_fig1_synth_val.yaml",),
                "codasca"),
    PaperFigure("codasca-fig1-fmnist", "codasca", "CODASCA Fig. 1 analog (Fashion-MNIST): test AUC against "
                "iterations per K, a line per window I; final AUC against I with I_max",
                ("experiments/codasca_fig1_fmnist.yaml",), "codasca"),
    PaperFigure("zohfl-table1", "zohfl", "ZO-HFL Table I: final test accuracy per method and setting, ours "
                "(mean ± std over seeds) beside the paper's",
                ("experiments/zohfl_table1_mnist.yaml", "experiments/zohfl_table1_fmnist.yaml"), "dots"),
    PaperFigure("zohfl-fig1", "zohfl", "ZO-HFL Fig. 1: examples per client and class of the Dirichlet(0.1) split",
                (), "partition"),
    PaperFigure("zohfl-fig2", "zohfl", "ZO-HFL Fig. 2: global loss against communication rounds for tau in "
                "{5, 20, 50} (Fashion-MNIST)", ("experiments/zohfl_fig2.yaml",)),
)
