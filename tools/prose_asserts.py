"""How many test assertions match the prose of a printed message rather than a behaviour (issue 63): an AST scan.

Counted, per test file and in all:

- ``asserts``: every ``assert`` statement;
- ``prose``: an ``assert`` that holds ``"text" in M`` or ``"text" not in M`` (a string, an f-string or a variable
  on the left; ``"Traceback" not in M`` is not counted: no traceback is a behaviour)
  where ``M`` is a message: a command's ``.output``/``.stdout``/``.stderr``, an exception's ``str(...)``/``.value``,
  captured ``.out``/``.err``, or a variable named ``out``, ``err``, ``msg``, ``message``, ``output``, ``stdout``,
  ``stderr``, ``text``, ``log`` (a file's content read into ``text`` counts too: this errs on the side of counting);
- ``match``: a ``match=`` given to ``pytest.raises``/``pytest.warns`` (a regular expression on the message);
- ``cases``: the rows of a ``pytest.mark.parametrize`` whose parameter names a message (``msg``, ``says``,
  ``what``, ``message``): one prose ``assert`` in a test of 36 cases is 36 cases told apart by their wording.

Usage: ``python tools/prose_asserts.py [tests] [--files]`` (``--files``: one line per file, most first).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MESSAGE_ATTRS = {"output", "stdout", "stderr", "value", "out", "err", "message", "msg"}
MESSAGE_NAMES = {"out", "err", "msg", "message", "output", "stdout", "stderr", "text", "log", "e", "exc"}


def _is_text(node: ast.AST) -> bool:
    """A string, an f-string or a variable (a test's parameter ``says``), but not ``"Traceback"``: that no
    traceback is printed is a behaviour."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value != "Traceback"
    return isinstance(node, (ast.JoinedStr, ast.Name, ast.Attribute, ast.Subscript))


def _is_message(node: ast.AST) -> bool:
    """Whether ``node`` reads like a printed message (see the module's docstring)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in MESSAGE_ATTRS:
            return True
        if isinstance(n, ast.Name) and n.id in MESSAGE_NAMES:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("str", "repr"):
            return True
    return False


def _prose(test: ast.AST) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.Compare):
            left = n.left
            for op, right in zip(n.ops, n.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and _is_text(left) and _is_message(right):
                    return True
                left = right
    return False


PROSE_PARAMS = {"msg", "says", "what", "message"}


def _cases(tree: ast.Module) -> int:
    """Rows of the parametrizations that pass a message to a test (see the module's docstring)."""
    lists = {t.id: len(n.value.elts) for n in tree.body if isinstance(n, ast.Assign)
             and isinstance(n.value, (ast.List, ast.Tuple)) for t in n.targets if isinstance(t, ast.Name)}
    rows = 0
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "parametrize"
                and len(n.args) >= 2 and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):
            continue
        names = {x.strip() for x in n.args[0].value.split(",")}
        if names & PROSE_PARAMS:
            vals = n.args[1]
            rows += len(vals.elts) if isinstance(vals, (ast.List, ast.Tuple)) else lists.get(getattr(vals, "id", ""), 0)
    return rows


def count(path: Path) -> tuple[int, int, int, int]:
    tree = ast.parse(path.read_text(), str(path))
    asserts = prose = match = 0
    for n in ast.walk(tree):
        if isinstance(n, ast.Assert):
            asserts += 1
            prose += _prose(n.test)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("raises", "warns"):
            match += any(k.arg == "match" for k in n.keywords)
    return asserts, prose, match, _cases(tree)


def main(argv: list[str]) -> None:
    root = Path(next((a for a in argv if not a.startswith("--")), "tests"))
    rows = [(f, *count(f)) for f in sorted(root.rglob("test_*.py"))]
    if "--files" in argv:
        for f, a, p, m, c in sorted(rows, key=lambda r: -(r[2] + r[3])):
            if p + m + c:
                print(f"{p + m:4d}  prose {p:3d}  match {m:3d}  of {a:4d} asserts; {c:3d} cases by wording  {f}")
    a, p, m, c = (sum(r[i] for r in rows) for i in (1, 2, 3, 4))
    print(f"{a} asserts in {len(rows)} files; {p} match a message's prose (`\"..\" in <message>`), "
          f"{m} more match it with `match=`: {p + m} in all; {c} parametrized cases pass a message to match")


if __name__ == "__main__":
    main(sys.argv[1:])
