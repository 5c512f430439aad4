"""The package's shape: its layers (folders) import only downwards, no import cycle inside ``fbo_cli``
(module-level or deferred imports alike),
``compare`` and ``tune`` do not import each other, only ``spec`` reads an experiment spec's YAML
(``config`` reads run configs for ``fbo run --config``), and every ``UsageError`` names its kind."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import fbo_cli

ROOT = Path(fbo_cli.__file__).parent


def _graph() -> dict[str, set[str]]:
    mods: dict[str, set[str]] = {}
    for f in ROOT.rglob("*.py"):
        rel = f.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ImportFrom) and n.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (n.level - 1)]
                mod = ".".join(base + ([n.module] if n.module else []))
                deps |= {mod} | {f"{mod}.{a.name}" for a in n.names}
            elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fbo_cli"):
                deps |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
            elif isinstance(n, ast.Import):
                deps |= {a.name for a in n.names if a.name.startswith("fbo_cli")}
        mods[name] = deps
    return {m: {d for d in ds if d in mods and d != m} for m, ds in mods.items()}


LAYERS = ["cli", "evidence", "bench", "grids", "runs", "algorithms", "tasks", "sim", "data"]
"""Top to bottom (docs/ARCHITECTURE.md): a module imports its own layer and the layers below it, never one above.
``fbo_cli/__init__.py``, ``errors.py`` and ``files.py`` (the one writer) sit under every layer, ``__main__.py``
above them all."""


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    if part == "__main__":
        return -1
    return LAYERS.index(part) if part in LAYERS else len(LAYERS)  # the package itself, errors


def _ups(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, ds in g.items() for d in ds if _layer(d) < _layer(m))


def test_every_module_is_in_a_layer():
    top = {p.name for p in ROOT.iterdir() if not p.name.startswith((".", "__pycache__"))}
    assert top == {f"{x}" for x in LAYERS} | {"__init__.py", "__main__.py", "errors.py", "files.py"}, top


def test_imports_go_down_the_layers():
    assert _ups(_graph()) == []


def test_an_import_up_a_layer_fails():
    """The check itself: a deferred import of a higher layer (sim importing the runner) is found."""
    g = _graph()
    g["fbo_cli.sim.federation"] = g["fbo_cli.sim.federation"] | {"fbo_cli.runs.runner"}
    assert set(_ups(g)) - set(_ups(_graph())) == {"fbo_cli.sim.federation -> fbo_cli.runs.runner"}


def test_no_import_cycle():
    g = _graph()
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for d in g[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [d])}"
            if d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in g:
        if m not in state:
            visit(m, [m])


def test_compare_and_tune_do_not_import_each_other():
    g = _graph()
    compare, tune = "fbo_cli.grids.compare", "fbo_cli.grids.tune"
    assert tune not in g[compare] and compare not in g[tune]


def test_only_spec_reads_a_spec():
    readers = {str(f.relative_to(ROOT)) for f in ROOT.rglob("*.py") if "load_config_file(" in f.read_text()}
    assert readers <= {"runs/config.py", "grids/spec.py", "cli/run.py", "bench/cases.py"}, readers  # bench: its cases
    cli = (ROOT / "cli" / "run.py").read_text()
    assert cli.count("load_config_file(") == 1 and "load_config_file(config)" in cli  # fbo run --config only


def test_the_report_takes_its_experiments_from_the_specs_paper_keys(tmp_path):
    from fbo_cli.errors import UsageError
    from fbo_cli.evidence.report.papers import PAPERS
    from fbo_cli.grids.spec import report_index

    assert {p for _, p, _ in report_index()} == {p.key for p in PAPERS}  # every paper has experiments, no stray key
    aggitd = next(p for p in PAPERS if p.key == "aggitd").specs
    assert aggitd[0] == "experiments/aggitd_table2.yaml" and "experiments/aggitd_fig6_mnist_cnn.yaml" in aggitd
    for name, order in (("b", 20), ("a", 30), ("c", 10)):
        (tmp_path / f"{name}.yaml").write_text(f"task: hyperrep\npaper: zohfl\norder: {order}\nalgorithms: []\n")
    (tmp_path / "d.yaml").write_text("task: hyperrep\nalgorithms: []\n")  # names no paper: not in the report
    assert [p.rsplit("/", 1)[1] for p, _, _ in report_index(tmp_path)] == ["c.yaml", "b.yaml", "a.yaml"]
    (tmp_path / "e.yaml").write_text("task: hyperrep\npaper: zohfl\norder: first\nalgorithms: []\n")
    with pytest.raises(UsageError, match="'order' an integer"):
        report_index(tmp_path)


def test_the_tests_mirror_the_layers():
    """A test lives in the folder of the layer it tests (tests/<layer>/test_*.py); only this package-wide test, the
    shared helpers and conftest sit in tests/ itself."""
    tests = Path(__file__).parent
    assert {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))} <= set(LAYERS)
    assert [p.name for p in tests.glob("test_*.py")] == ["test_architecture.py"]


def _kindless(source: str, where: str = "") -> list[str]:
    """``UsageError(...)`` calls in ``source`` that give no ``kind=`` (the default ``usage`` tells a caller
    nothing), or an explicit ``kind="usage"`` with no comment in the call's lines saying why, or a kind the
    class's docstring does not list: what a test or a recovering caller cannot tell apart by kind."""
    from fbo_cli.errors import UsageError

    listed = set(re.findall(r"^\s*- ``(\w+)``:", UsageError.__doc__, re.M))
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {t.start[0] for t in tokens if t.type == tokenize.COMMENT}
    bad = []
    for n in ast.walk(ast.parse(source)):
        if not (isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "UsageError"):
            continue
        kind = next((k.value for k in n.keywords if k.arg == "kind"), None)
        said = any(n.lineno <= c <= n.end_lineno for c in comments)
        if kind is None or (isinstance(kind, ast.Constant) and (kind.value not in listed or
                                                                 (kind.value == "usage" and not said))):
            bad.append(f"{where}:{n.lineno}")
    return bad


def test_every_usage_error_names_its_kind():
    bad = [b for f in sorted(ROOT.rglob("*.py")) for b in _kindless(f.read_text(), str(f.relative_to(ROOT)))]
    assert bad == [], f"UsageError(...) without a listed kind= (errors.py's docstring lists them): {bad}"


def test_a_kindless_usage_error_is_found():
    """The check itself: no kind, an unlisted kind and an unexplained ``usage`` are found; a listed kind and a
    ``usage`` with its reason are not."""
    src = ("raise UsageError('a')\n"
           "raise errors.UsageError('b', field='x')\n"
           "raise UsageError('c', kind='no_such_kind')\n"
           "raise UsageError('d # not a comment', kind='usage')\n"
           "raise UsageError('e', kind='bad_value', field='x')\n"
           "raise UsageError('f', kind='usage')  # why: nothing else fits\n")
    assert _kindless(src) == [":1", ":2", ":3", ":4"]
