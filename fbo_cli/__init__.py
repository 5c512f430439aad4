"""fbo: an experiment runner for federated bilevel and federated minimax optimization."""

__version__ = "0.1.0"

import warnings as _warnings

# torchvision's import triggers torch.jit's deprecation notice; it is not ours to act on.
_warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit")
