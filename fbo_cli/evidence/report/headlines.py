"""Each paper's headline claims, in its words and where they are in it, mapped to the specs' claims that check
them (the one table of that mapping, read by :mod:`.bottomline`); and our own findings, kept apart.

A headline claim is checked by every spec claim whose text starts with one of its ``checks`` prefixes, in any
paper's specs: a claim about AdaFBiO checked in a FedBiO experiment counts on AdaFBiO's bottom line, and a claim
repeated over specs and settings counts once, its settings' verdicts counted beside it. A spec claim that no
headline or finding names stays in the detailed tables only. ``data``: the datasets the paper's own experiments
use for it (empty: the paper prints no experiment, so every run is our reconstruction).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Headline:
    words: str  # the claim in the paper's words (quoted where it quotes)
    where: str  # where it is in the paper (our findings: "ours")
    checks: tuple[str, ...]  # prefixes of the spec claims' texts that check it


# the datasets' short names on the first screen
SHORT = {"mnist": "MNIST", "fashion-mnist": "F-MNIST", "cifar10": "CIFAR-10", "synth-c100": "synthetic"}
# a paper without numbers beside ours: why, in a few words
NO_NUMBERS = {"fedbio": "it prints none", "adafbio": "it prints none",
              "codasca": "its I_max is on ImageNet-IH, not offline: context only"}

PAPER_DATA: dict[str, tuple[str, ...]] = {
    "aggitd": ("mnist",), "fedbio": (), "adafbio": (), "codasca": ("imagenet-ih", "cifar100-ih"),
    "zohfl": ("mnist", "fashion-mnist", "cifar10")}

HEADLINES: dict[str, tuple[Headline, ...]] = {
    "aggitd": (
        Headline("fewer rounds to 90% than FedNest", "Table 2, Fig. 2",
                 ("FBO-AggITD reaches 90% in fewer communication rounds than FedNest",
                  "FBO-AggITD reaches 90% in fewer rounds than FedNest",
                  "FBO-AggITD reaches the target in fewer communication rounds than FedNest")),
        Headline("\"more than 2-3 times fewer communication rounds\"", "Sec. 5",
                 ("FBO-AggITD needs at least 2x fewer rounds",)),
        Headline("\"a higher final test accuracy than FedNest\" in all four setups", "Table 2",
                 ("FBO-AggITD ends with a higher test accuracy than FedNest", "FBO-AggITD ends above FedNest")),
        Headline("local updates (τ = 5) cut the rounds", "Fig. 2 (3-4)",
                 ("Fig. 2, panels 3-4",)),
        Headline("FedNest ends above LFedNest", "Fig. 3", ("FedNest ends above LFedNest",)),
        Headline("FBO-AggITD_SGD is best and fastest", "Fig. 4", ("FBO-AggITD_SGD",)),
        Headline("CNN: FBO-AggITD converges (97.6% / 96.7%), FedNest fails", "Fig. 6",
                 ("FBO-AggITD ends with a higher training accuracy than FedNest",)),
    ),
    "fedbio": (
        Headline("FedBiOAcc is at least as good as FedBiO", "abstract, Thm 2",
                 ("FedBiOAcc (accelerated) ends more accurate than FedBiO",)),
        Headline("FedBiO and FedBiOAcc beat FedNest and FBO-AggITD", "abstract, Table 1",
                 ("FedBiO beats FedNest", "FedBiO beats FBO-AggITD", "FedBiOAcc beats FBO-AggITD")),
        Headline("local lower level: FedBiOAcc-Local ≥ FedBiO-Local", "abstract",
                 ("FedBiOAcc-Local ends",)),
    ),
    "adafbio": (
        Headline("AdaFBiO is more efficient than FedNest", "abstract, Table 1",
                 ("AdaFBiO (Adam) ends more accurate than FedNest", "AdaFBiO beats FedNest")),
        Headline("at least as good as the FedBiO family (same complexity)", "Table 1",
                 ("AdaFBiO (Adam) ends more accurate than FedBiOAcc", "AdaFBiO beats FedBiO-Local")),
        Headline("its adaptive matrices help", "Table 1",
                 ("the adaptive matrices help",)),
    ),
    "codasca": (
        Headline("CODASCA tolerates a 4x larger window I than CODA+", "Fig. 1",
                 ("CODASCA tolerates a larger communication window",)),
        Headline("at a large I, CODASCA has the higher AUC", "Fig. 1",
                 ("At the largest window CODASCA",)),
        Headline("fewer clients K tolerate a larger I", "Fig. 1",
                 ("a smaller K tolerates a larger I", "... and CODA+'s")),
    ),
    "zohfl": (
        Headline("\"the best test accuracy in 5 out of 6\" settings", "Table I",
                 ("ZO-HFL beats FedAvg", "ZO-HFL beats FedProx", "ZO-HFL beats SCAFFOLD")),
        Headline("degrades little (90.82 → 87.70; our check's ±5 points is weak)", "Table I",
                 ("ZO-HFL degrades little",)),
        Headline("FedAvg and FedProx collapse (87 → 39-45)", "Table I",
                 ("FedAvg collapses", "FedProx collapses")),
        Headline("the clients' zeroth-order steps help (its premise)", "Alg. 1",
                 ("the clients help",)),
        Headline("a larger τ lowers the loss faster", "Fig. 2",
                 ("a larger tau lowers the global loss", "... and tau = 50 ends below tau = 20")),
    ),
}

FINDINGS: dict[str, tuple[Headline, ...]] = {
    "aggitd": (
        Headline("FBO-AggITD needs fewer outer iterations to the target than FedNest (implied by Table 2)", "ours",
                 ("FBO-AggITD needs fewer outer iterations", "... and than FedNest in the public code's form")),
        Headline("on the MNIST CNN at the paper's steps, tau = 5 ends above tau = 1 (half its runs collapse)", "ours",
                 ("FBO-AggITD at tau = 5",)),
    ),
    "fedbio": (
        Headline("the bilevel weights help: FedBiO beats FedAvg on the noisy data", "ours",
                 ("FedBiO beats FedAvg on the noisy data",)),
        Headline("per-client heads beat a global head", "ours", ("Per-client heads",)),
    ),
    "adafbio": (
        Headline("the bilevel weights help: AdaFBiO beats FedAvg on the noisy data", "ours",
                 ("the bilevel weights help: AdaFBiO",)),
    ),
    "zohfl": (
        Headline("ZO-HFL ends where server-only SGD ends (within half a point): the clients do not move the model",
                 "ours", ("the finding: ZO-HFL ends where server-only SGD ends",
                          "the paper's ZO-HFL ends where server-only SGD ends")),
        Headline("a 10x larger penalty weight or smoothing radius does not let the clients help", "ours",
                 ("with lambda=10", "with eta=1")),
    ),
}
