"""Pieces shared by the STORM-type federated bilevel algorithms (AdaFBiO, Huang, arXiv 2211.01122; FedBiO
family, Li, Huang & Huang, NeurIPS 2023): the STORM recursion and the step-size schedule α_t = δ / (u0 + t)^{1/3}.

STORM (Cutkosky & Orabona 2019), as FedBiO Alg. 2 lines 10-12 / Alg. 4 and AdaFBiO eqs. (8)-(9)
write it, with the *same* minibatch ξ_{t+1} at the new and the old point:

    d_{t+1} = G(z_{t+1}; ξ_{t+1}) + (1 - a_t) (d_t - G(z_t; ξ_{t+1}))

``a_t`` is the momentum weight (FedBiO: a_t = c α_t²; AdaFBiO: α_{t+1}, β_{t+1}). With a_t = 1 the
recursion is the plain stochastic estimator ``G(z_{t+1}; ξ_{t+1})``.
"""

from __future__ import annotations

import torch

from ..errors import UsageError

SCHEDULES = ("const", "cbrt")


def storm(new: torch.Tensor, est: torch.Tensor, old: torch.Tensor, weight: float) -> torch.Tensor:
    """``new + (1 - weight) (est - old)``: the STORM estimator from the stochastic estimate at the
    new point (``new``), the previous estimator (``est``) and the estimate at the old point with the
    same sample (``old``). ``weight`` = a_t ∈ [0, 1]; 1 gives ``new`` exactly."""
    if weight == 1.0:
        return new.clone()
    return new + (1.0 - weight) * (est - old)


def step_factor(kind: str, t: int, delta: float, u0: float) -> float:
    """α_t: ``const`` -> δ for every t; ``cbrt`` -> δ / (u0 + t)^{1/3} (FedBiO Thms 2/4, t >= 1)."""
    if kind == "const":
        return float(delta)
    if kind == "cbrt":
        return float(delta) / (float(u0) + t) ** (1.0 / 3.0)
    raise UsageError(f"schedule must be one of {', '.join(SCHEDULES)}; got '{kind}'",
                     kind="bad_value", field="schedule", value=kind)


def check_schedule(kind: str, delta: float, u0: float) -> None:
    if kind not in SCHEDULES:
        raise UsageError(f"schedule must be one of {', '.join(SCHEDULES)}; got '{kind}'",
                         kind="bad_value", field="schedule", value=kind)
    if delta <= 0:
        raise UsageError(f"delta (the step-size factor α) must be > 0, got {delta}",
                         kind="bad_value", field="delta", value=delta)
    if kind == "cbrt" and u0 + 1 <= 0:
        raise UsageError(f"u0 must be > -1 for the cbrt schedule, got {u0}", kind="bad_value", field="u0", value=u0)


# --------------------------------------------------------------------------------------------------
# Neumann-series hypergradient estimators (local Hessians) and same-sample evaluation at two points


def pair(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """Stack the new and the old point of every client on the client dimension (``-2``): ``[2M, d]``
    (``[R, 2M, d]`` in a run batch), so that one vectorized call evaluates both STORM points (the batch goes
    through :func:`twice`)."""
    return torch.cat([new, old], -2)


def twice(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same batch (and its dropout masks) for the new and the old point: ``[2M, ...]``."""
    return {k: torch.cat([v, v]) for k, v in batch.items()}


def unpair(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pair`: ``(at the new point, at the old point)``."""
    return t.chunk(2, -2)
