"""Issue 51's moves: `git mv` each module to its layer, then rewrite what the moves force (imports, dotted
module paths and fbo_cli/ file paths in code, tests, docs, Makefile). Run from the repository root."""
import ast, pathlib, re, subprocess, sys

MOVES = {  # old module -> new module (a package moves with everything under it)
    "fbo_cli.federation": "fbo_cli.sim.federation",
    "fbo_cli.blockstack": "fbo_cli.sim.blockstack",
    "fbo_cli.bounds": "fbo_cli.sim.bounds",
    "fbo_cli.testing": "fbo_cli.tasks.quadratic",
    "fbo_cli.batched": "fbo_cli.algorithms.runs_as_clients",
    "fbo_cli.config": "fbo_cli.runs.config",
    "fbo_cli.runner": "fbo_cli.runs.runner",
    "fbo_cli.checkpoint": "fbo_cli.runs.checkpoint",
    "fbo_cli.provenance": "fbo_cli.runs.identity",
    "fbo_cli.describe": "fbo_cli.runs.describe",
    "fbo_cli.collapse": "fbo_cli.runs.collapse",
    "fbo_cli.results": "fbo_cli.runs.rundir",
    "fbo_cli.results.cost": "fbo_cli.runs.cost",
    "fbo_cli.results.table": "fbo_cli.runs.table",
    "fbo_cli.spec": "fbo_cli.grids.spec",
    "fbo_cli.spec_checks": "fbo_cli.grids.spec_checks",
    "fbo_cli.spec_types": "fbo_cli.grids.spec_types",
    "fbo_cli.compare": "fbo_cli.grids.compare",
    "fbo_cli.settle": "fbo_cli.grids.settle",
    "fbo_cli.batch": "fbo_cli.grids.run_batches",
    "fbo_cli.executors": "fbo_cli.grids.executors",
    "fbo_cli.tune": "fbo_cli.grids.tune",
    "fbo_cli.plots": "fbo_cli.grids.plots",
    "fbo_cli.plotstyle": "fbo_cli.grids.plotstyle",
    "fbo_cli.check": "fbo_cli.evidence.check",
    "fbo_cli.witness": "fbo_cli.evidence.witness",
    "fbo_cli.reproduce": "fbo_cli.evidence.reproduce",
    "fbo_cli.paper_figures": "fbo_cli.evidence.paper_figures",
    "fbo_cli.diagnostics": "fbo_cli.evidence.diagnostics",
    "fbo_cli.export": "fbo_cli.evidence.export",
    "fbo_cli.report": "fbo_cli.evidence.report",
    "fbo_cli.report.witness": "fbo_cli.evidence.report.witness_table",
    "fbo_cli.report.codasca": "fbo_cli.evidence.report.codasca_section",
    "fbo_cli.report.zohfl": "fbo_cli.evidence.report.zohfl_section",
}
NEW_PACKAGES = {"sim": "The simulator: the federation (ledger, oracles, sampling, aggregation), client stacks, bounds.",
                "runs": "A run's life: config, runner, checkpoint, identity, the run directory's files.",
                "grids": "Grids of runs: specs, compare, tune, settle, run batches, executors.",
                "evidence": "Evidence: the report, figures, check, witness, reproduction."}


def new_mod(m):
    """The module ``m`` (old dotted path) is now, by the longest moved prefix; unmoved: itself."""
    for old in sorted(MOVES, key=len, reverse=True):
        if m == old or m.startswith(old + "."):
            return MOVES[old] + m[len(old):]
    return m


AS_MODULE = {"fbo_cli.runs.rundir"}  # a package whose submodules all moved out: now one module


def path_of(m, pkg):
    p = pathlib.Path(*m.split("."))
    return p / "__init__.py" if pkg and m not in AS_MODULE else p.with_suffix(".py")


def old_files():
    return {str(p.with_suffix("")).replace("/", ".").removesuffix(".__init__"): p
            for p in pathlib.Path("fbo_cli").rglob("*.py")}


def do_moves():
    mods = old_files()
    for name, doc in NEW_PACKAGES.items():
        init = pathlib.Path("fbo_cli", name, "__init__.py")
        init.parent.mkdir(exist_ok=True)
        init.write_text(f'"""{doc}"""\n')
    moved = {}
    for m, p in mods.items():
        nm = new_mod(m)
        if nm != m:
            np_ = path_of(nm, p.name == "__init__.py")
            np_.parent.mkdir(parents=True, exist_ok=True)
            moved[str(p)] = str(np_)
    for src, dst in sorted(moved.items()):
        subprocess.run(["git", "mv", src, dst], check=True)
    return mods, moved


def rel(frm_pkg, target):
    """``target`` relative to the package ``frm_pkg`` (both dotted)."""
    a, b = frm_pkg.split("."), target.split(".")
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return "." * (len(a) - n + 1) + ".".join(b[n:])


def rewrite_imports(path, old_mod, new_mod_name, is_pkg, old_mods, new_is_pkg=None):
    src = path.read_text()
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    old_pkg = old_mod if is_pkg else old_mod.rpartition(".")[0]
    new_is_pkg = is_pkg if new_is_pkg is None else new_is_pkg
    new_pkg = new_mod_name if new_is_pkg else new_mod_name.rpartition(".")[0]
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = old_pkg.split(".")[:len(old_pkg.split(".")) - (node.level - 1)]
                tgt = ".".join(base + ([node.module] if node.module else []))
            else:
                tgt = node.module or ""
            if not (tgt == "fbo_cli" or tgt.startswith("fbo_cli.")):
                continue
            mod_names = [a for a in node.names if f"{tgt}.{a.name}" in old_mods]
            if mod_names and len(mod_names) != len(node.names):
                sys.exit(f"{path}:{node.lineno}: mixed module and name import")
            out = []
            frm_old = "." * node.level + (node.module or "")
            targets = [new_mod(f"{tgt}.{a.name}").rpartition(".") for a in mod_names]
            if mod_names and all(t[2] == a.name for t, a in zip(targets, mod_names)) \
                    and len({t[0] for t in targets}) == 1:  # from PKG import modules that stay together
                parent = targets[0][0]
                frm = rel(new_pkg, parent) if node.level else parent
                edits.append((node, ("from", frm_old, frm) if frm != frm_old else None))
                continue
            if mod_names:  # from PKG import module [as x], ...
                for a in node.names:
                    nm = new_mod(f"{tgt}.{a.name}")
                    parent, _, stem = nm.rpartition(".")
                    frm = rel(new_pkg, parent) if node.level else parent
                    alias = a.asname or (a.name if stem != a.name else None)
                    out.append(f"from {frm} import {stem}" + (f" as {alias}" if alias else ""))
                seg_new = ("\n" + " " * node.col_offset).join(out)
            else:
                nt = new_mod(tgt)
                frm = rel(new_pkg, nt) if node.level else nt
                seg_new = None
                if frm != frm_old:
                    seg_new = ("from", frm_old, frm)
            edits.append((node, seg_new))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fbo_cli.") and new_mod(a.name) != a.name:
                    edits.append((node, ("import", a.name, new_mod(a.name))))
    for node, seg_new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        if seg_new is None:
            continue
        l0, l1 = node.lineno - 1, node.end_lineno - 1
        text = "".join(lines[l0:l1 + 1])
        start = sum(len(x) for x in lines[:l0]) + len(lines[l0][:node.col_offset].encode().decode())
        seg = text[node.col_offset:len(text) - (len(lines[l1]) - len(lines[l1][:node.end_col_offset]))]
        if isinstance(seg_new, tuple):
            kind, old, new = seg_new
            pat = rf"^from\s+{re.escape(old)}(?=\s+import)" if kind == "from" else rf"\b{re.escape(old)}\b"
            new_seg, n = re.subn(pat, (f"from {new}" if kind == "from" else new).replace("\\", "\\\\"), seg, count=1)
            assert n == 1, (path, node.lineno, seg)
        else:
            new_seg = seg_new
        if new_seg != seg:
            text = text[:node.col_offset] + new_seg + text[node.col_offset + len(seg):]
            lines[l0:l1 + 1] = [text]
    path.write_text("".join(lines))


DOTTED = re.compile(r"\bfbo_cli(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
SLASHED = re.compile(r"\bfbo_cli/([A-Za-z0-9_/]+)(\.py)?")
KEEP_LINES = ('"driver"', '"procedure"')  # strings written into run records: left as they are


def rewrite_paths(path, old_mods):
    src = path.read_text()

    def dotted(m):
        parts = m.group(0).split(".")
        for k in range(len(parts), 1, -1):  # the longest prefix that is an old module
            head = ".".join(parts[:k])
            if head in old_mods:
                return ".".join([new_mod(head)] + parts[k:])
        return m.group(0)

    def slashed(m):
        body, py = m.group(1), m.group(2)
        mod = "fbo_cli." + body.strip("/").replace("/", ".")
        if py and mod.endswith(".__init__"):
            mod = mod.removesuffix(".__init__")
            nm = new_mod(mod)
            return "fbo_cli/" + "/".join(nm.split(".")[1:]) + "/__init__.py"
        if mod not in old_mods:
            return m.group(0)
        nm = new_mod(mod)
        was_pkg = old_mods[mod].name == "__init__.py"
        if py or not was_pkg:
            if was_pkg:  # fbo_cli/results.py does not exist; keep as written
                return m.group(0)
            return "fbo_cli/" + "/".join(nm.split(".")[1:]) + (py or "")
        tail = "/" if body.endswith("/") else ""
        return "fbo_cli/" + "/".join(nm.split(".")[1:]) + tail

    out = []
    for line in src.splitlines(keepends=True):
        if not any(k in line for k in KEEP_LINES):
            line = SLASHED.sub(slashed, DOTTED.sub(dotted, line))
        out.append(line)
    new = "".join(out)
    if new != src:
        path.write_text(new)


def main():
    mods, moved = do_moves()
    back = {v: k for k, v in moved.items()}
    for p in pathlib.Path("fbo_cli").rglob("*.py"):
        old_p = pathlib.Path(back.get(str(p), str(p)))
        if not old_p.exists() and str(p) not in back and p.name == "__init__.py" and p.parent.name in NEW_PACKAGES:
            continue
        old_m = str(old_p.with_suffix("")).replace("/", ".").removesuffix(".__init__")
        rewrite_imports(p, old_m, new_mod(old_m), old_p.name == "__init__.py", mods, p.name == "__init__.py")
    for p in pathlib.Path("tests").rglob("*.py"):
        rewrite_imports(p, "tests." + p.stem, "tests." + p.stem, False, mods)
    texts = [p for p in pathlib.Path(".").rglob("*") if p.is_file() and (p.suffix in (".py", ".md", ".toml", ".sh") or p.name in ("Makefile", "run"))
             and p.parts[0] not in (".git", ".venv", "data", "results", "experiments")
             and not str(p).startswith("docs/results/")]
    for p in texts:
        rewrite_paths(p, mods)


main()
subprocess.run([".venv/bin/ruff", "check", "--fix", "--select", "I", "-q", "fbo_cli", "tests"])
for d in sorted(pathlib.Path("fbo_cli").rglob("*"), reverse=True):  # the folders the moves emptied
    if d.is_dir() and not any(p.suffix == ".py" for p in d.rglob("*")):
        subprocess.run(["rm", "-rf", str(d)], check=True)
