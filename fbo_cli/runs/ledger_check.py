"""The ledger contract of one outer iteration: what the runner (and a run batch) checks after every ``step()``.

An iteration charges at least one communication round (``ledger.comm``), and exactly what its algorithm
declares: ``rounds_per_iteration()``, or where that says None ("varies") a user class's ``rounds`` string that is
a sum of its integer hyperparameters (the template's ``"N + T + 3"``), so that a step that forgets one
``ledger.comm`` is caught rather than plotted at a discount. The error names the class's ``step`` (issue 61).
"""

from __future__ import annotations

from ..sim.federation import Ledger


class LedgerError(RuntimeError):
    """An outer iteration charged no communication round, or not the rounds its algorithm declares: the run
    stops (status ``failed``) rather than loop forever or plot a wrong x axis."""


def declared_rounds(algo) -> int | None:
    """The rounds one outer iteration of ``algo`` must charge: ``rounds_per_iteration()``, or, where that says None
    ("varies"), a user class's declared ``rounds`` string when it is a sum of its hyperparameters and integers
    (the template's ``"N + T + 3"``), evaluated on its ``hp``; None where neither says a number."""
    want = algo.rounds_per_iteration()
    if want is not None:
        return want
    import ast
    import operator

    owner = next((c for c in type(algo).__mro__ if "rounds" in vars(c)), None)
    if owner is None or owner.__module__.startswith("fbo_cli.") or not isinstance(owner.rounds, str):
        return None  # fbo's own classes are held to their rounds_per_iteration() (their strings are prose)
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}

    def value(n):
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name) and type(getattr(algo.hp, n.id, None)) is int:
            return getattr(algo.hp, n.id)
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](value(n.left), value(n.right))
        raise ValueError(n)

    try:
        return int(value(ast.parse(owner.rounds.strip(), mode="eval").body))
    except (SyntaxError, ValueError, RecursionError, ZeroDivisionError):
        return None


def _step_at(cls) -> str:
    """`` (step() at FILE:LINE)`` of the class whose ``step`` ``cls`` runs, `` (FILE: step() of Base)`` where it
    inherits it; '' where the source cannot be found."""
    import inspect

    owner = next((c for c in cls.__mro__ if "step" in vars(c)), cls)
    try:
        if owner is cls:
            return f" (step() at {inspect.getsourcefile(cls.step)}:{inspect.getsourcelines(cls.step)[1]})"
        return f" ({inspect.getsourcefile(cls)}: step() of {owner.__name__})"
    except (OSError, TypeError):
        return ""


def check_rounds(algo, led: Ledger, before: int) -> None:
    """The ledger contract of one outer iteration that started at ``before`` rounds: it charges at least one
    round (``ledger.comm``), and exactly what the algorithm declares (:func:`declared_rounds`: its
    ``rounds_per_iteration()``, or where that varies its ``rounds`` string; the first iteration at least that many:
    it may add start-up rounds). The error names the class's ``step`` (its file and line)."""
    got, want = led.rounds - before, declared_rounds(algo)
    name = algo.name or type(algo).__name__
    where = _step_at(type(algo))
    if got <= 0:
        raise LedgerError(f"'{name}'{where}: outer iteration {led.iterations} charged no communication round "
                          "(step() must call self.ledger.comm(...) once per round); stopped instead of looping")
    # the first outer iteration may add start-up rounds (AdaFBiO's initial average with init_matrices=average)
    if want is not None and (got < want if led.iterations == 1 else got != want):
        said = ("its rounds_per_iteration() says" if algo.rounds_per_iteration() is not None
                else f"its declared rounds {type(algo).rounds!r} say")
        raise LedgerError(f"'{name}'{where}: outer iteration {led.iterations} charged {got} communication rounds, "
                          f"but {said} {want}; fix one of them (a step that forgets a self.ledger.comm(...) "
                          "undercounts the x axis)")
