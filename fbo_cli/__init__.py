"""fbo: an experiment runner for federated bilevel and federated minimax optimization."""

__version__ = "0.1.0"
