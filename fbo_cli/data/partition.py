"""Partitions of a training pool over clients. Each returns a list of index arrays, one per client.

* ``iid``: a random permutation cut into ``m`` equal parts (McMahan et al. 2017; FedNest repo).
* ``shards``: sort by label, cut into ``shards_per_client * m`` shards, give each client
  ``shards_per_client`` random shards (McMahan et al. 2017; FedNest repo's ``mnist_noniid``).
* ``dirichlet``: per class, proportions ~ Dir(alpha) over clients, with NIID-Bench's balancing
  rule (a client already holding N/m examples gets no more) and resampling until every client has
  at least ``min_size`` examples (Li et al., NIID-Bench, 2022).
* ``class-disjoint``: classes dealt out so that clients share no class (the setting of CODASCA,
  Yuan, Guo, Xu, Ying & Yang, ICML 2021).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError

PARTITIONS = ("iid", "shards", "dirichlet", "class-disjoint")


def iid(labels: np.ndarray, m: int, rs: np.random.RandomState) -> list[np.ndarray]:
    per = len(labels) // m
    perm = rs.permutation(len(labels))
    return [np.sort(perm[i * per:(i + 1) * per]) for i in range(m)]


def shards(labels: np.ndarray, m: int, rs: np.random.RandomState, shards_per_client: int = 2) -> list[np.ndarray]:
    n_shards = shards_per_client * m
    size = len(labels) // n_shards
    order = np.argsort(labels, kind="stable")
    pick = rs.permutation(n_shards)
    return [np.sort(np.concatenate([order[s * size:(s + 1) * size] for s in
                                    pick[i * shards_per_client:(i + 1) * shards_per_client]])) for i in range(m)]


def dirichlet(labels: np.ndarray, m: int, rs: np.random.RandomState, alpha: float = 0.5,
              min_size: int = 10) -> list[np.ndarray]:
    n, classes = len(labels), int(labels.max()) + 1
    min_size = min(min_size, n // m)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(m)]
        for c in range(classes):
            idx = np.where(labels == c)[0]
            rs.shuffle(idx)
            p = rs.dirichlet(np.full(m, alpha))
            if not np.isfinite(p).all() or p.sum() <= 0:  # a tiny alpha underflows (0/0): its limit, one client
                p = np.eye(m)[rs.randint(m)]
            q = np.array([pj * (len(pk) < n / m) for pj, pk in zip(p, parts)])
            p = q / q.sum() if q.sum() > 0 else p  # every client full: the draw as it is
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for j, chunk in enumerate(np.split(idx, cuts)):
                parts[j].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise UsageError(f"dirichlet partition: could not give every one of {m} clients {min_size} examples "
                     f"with alpha={alpha}; use fewer clients or a larger alpha",
                     kind="bad_value", field="clients/alpha")


def class_disjoint(labels: np.ndarray, m: int, rs: np.random.RandomState) -> list[np.ndarray]:
    """Clients share no class. With an even number of classes C and ``m <= C/2`` this is CODASCA's
    rule (its official code): the class ids ``0..C/2-1`` are shuffled and dealt as
    ``groups = order[i::m]``, and client i owns the classes ``G_i ∪ {c + C/2 : c ∈ G_i}``, i.e. the
    same number of classes from each half (the ``auc`` task's negatives and positives). Otherwise
    single classes are dealt out at random."""
    classes = int(labels.max()) + 1
    half = classes // 2
    if classes % 2 == 0 and m <= half:
        order = rs.permutation(half)
        groups = [order[i::m] for i in range(m)]
        return [np.sort(np.where(np.isin(labels, np.concatenate([g, g + half])))[0]) for g in groups]
    if m > classes:
        raise UsageError(f"class-disjoint partition needs clients <= classes ({classes}), got {m}",
                         kind="bad_value", field="clients", value=m)
    owner = rs.permutation(classes) % m
    return [np.sort(np.where(np.isin(labels, np.where(owner == i)[0]))[0]) for i in range(m)]


def make_partition(kind: str, labels: np.ndarray, m: int, seed: int, alpha: float = 0.5,
                   shards_per_client: int = 2) -> list[np.ndarray]:
    if m < 1:
        raise UsageError(f"clients must be >= 1, got {m}", kind="bad_value", field="clients", value=m)
    if m > len(labels):
        raise UsageError(f"clients ({m}) exceeds the number of training examples ({len(labels)})", kind="bad_value",
                         field="clients", value=m)
    rs = np.random.RandomState(seed)
    if kind == "iid":
        return iid(labels, m, rs)
    if kind == "shards":
        return shards(labels, m, rs, shards_per_client)
    if kind == "dirichlet":
        if alpha <= 0:
            raise UsageError(f"dirichlet alpha must be > 0, got {alpha}", kind="bad_value", field="alpha", value=alpha)
        return dirichlet(labels, m, rs, alpha)
    if kind == "class-disjoint":
        return class_disjoint(labels, m, rs)
    raise UsageError(f"unknown partition '{kind}'; choose one of: {', '.join(PARTITIONS)}", kind="unknown",
                     field="partition", value=kind)


def split_shares(parts: list[np.ndarray], frac: float, rs: np.random.RandomState, min_one: bool,
                 total: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's share, shuffled by ``rs``, split into a held-out part (``frac`` of it, rounded; at
    least one example when ``min_one`` and the share has two) and a training part, both sorted:
    ``(train, held)``. A client left without training data is bad input (``total``: the examples
    shared out, for the message)."""
    train, held = [], []
    for p in parts:
        p = rs.permutation(p)
        k = int(round(frac * len(p))) if len(p) > 1 else 0
        k = max(1, k) if min_one and len(p) > 1 else k
        held.append(np.sort(p[:k]))
        train.append(np.sort(p[k:]))
    if min(len(p) for p in train) == 0:
        raise UsageError(f"some client got no training examples ({len(parts)} clients on {total} examples)",
                         kind="bad_value", field="clients", value=len(parts))
    return train, held
