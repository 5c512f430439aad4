"""A spec's way through compare.run_experiment, from the code: a depth-first walk of the static call graph
(functions called by name: same-module, imported from fbo_cli at module level or inside the function, or as
module.attr), each function entered once; consecutive calls inside one module are one stay. Counts stays,
modules, climbs (a stay in a higher layer than the stay before it), returns (a stay in a module already left).
RETURNS=1 (default) counts the way back into a caller as a stay, RETURNS=0 counts only entries by a call.
METHODS=1 also follows what the default walk cannot see, calls through objects: a class's constructor to its
``__init__``, ``self.m()`` to the class's own ``m``, and ``x.m()`` to every fbo class method named ``m`` when at
most four classes of the caller's layer or below define one (an interface's implementations: ``ex.submit`` reaches
every executor's ``submit``; an object of a layer above can only be a callback handed down, not the way on).

    python3 docs/architecture/spec_way.py . fbo_cli.grids.compare.run_experiment
    python3 docs/architecture/spec_way.py <old tree> fbo_cli.compare.run_experiment docs/architecture/move_to_layers.py
"""
import ast, collections, pathlib, sys
root = pathlib.Path(sys.argv[1]); start = sys.argv[2]; layer_of = None
LAYERS = ["cli", "evidence", "bench", "grids", "runs", "algorithms", "tasks", "sim", "data"]
MAP = None
if len(sys.argv) > 3:  # old tree: place each module by where it moved
    src = open(sys.argv[3]).read()
    ns = {}; exec(src.split("def do_moves")[0], ns); MAP = ns["new_mod"]
def rank(m):
    m = MAP(m) if MAP else m
    part = m.split(".")[1] if "." in m else ""
    return LAYERS.index(part) if part in LAYERS else len(LAYERS)
mods = {}
for f in (root / "fbo_cli").rglob("*.py"):
    name = ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    mods[name] = (f, ast.parse(f.read_text()))
def resolve_from(mod, is_pkg, node):
    pkg = mod if is_pkg else mod.rpartition(".")[0]
    if node.level:
        base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""
def imports(mod, body_nodes, is_pkg):
    names = {}
    for n in body_nodes:
        if isinstance(n, ast.ImportFrom):
            tgt = resolve_from(mod, is_pkg, n)
            if not tgt.startswith("fbo_cli"):
                continue
            for a in n.names:
                full = f"{tgt}.{a.name}"
                names[a.asname or a.name] = ("mod", full) if full in mods else ("fn", tgt, a.name)
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith("fbo_cli") and a.asname:
                    names[a.asname] = ("mod", a.name)
    return names
funcs = {}
for m, (f, tree) in mods.items():
    is_pkg = f.name == "__init__.py"
    top = imports(m, [n for n in tree.body], is_pkg)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for name, n in defs.items():
        funcs[(m, name)] = (n, top, is_pkg, defs)
        if isinstance(n, ast.ClassDef):
            for b in n.body:
                if isinstance(b, ast.FunctionDef):
                    funcs[(m, f"{name}.{b.name}")] = (b, top, is_pkg, defs)
METHODS = __import__("os").environ.get("METHODS", "0") == "1"
by_name = collections.defaultdict(list)
for (m, name) in funcs:
    if "." in name:
        by_name[name.split(".")[1]].append((m, name))
def methods(key, fn):
    """What a call through an object reaches (METHODS=1): see the module's docstring."""
    m, name = key
    if isinstance(fn, ast.Name):  # a constructor
        return []
    if isinstance(fn.value, ast.Name) and fn.value.id == "self" and "." in name:
        own = (m, f"{name.split('.')[0]}.{fn.attr}")
        if own in funcs:
            return [own]
    ks = [k for k in by_name.get(fn.attr, []) if rank(k[0]) >= rank(m)]  # an object of a layer above: a callback
    return ks if len(ks) <= 4 and not fn.attr.startswith("__") else []
def find(m, name, seen=0):
    """(module, name) where ``name`` of module ``m`` is defined (following re-exports)."""
    if (m, name) in funcs or seen > 5:
        return (m, name) if (m, name) in funcs else None
    if m not in mods:
        return None
    f, tree = mods[m]
    t = imports(m, tree.body, f.name == "__init__.py").get(name)
    if t and t[0] == "fn":
        return find(t[1], t[2], seen + 1)
    return None
def calls(key):
    n, top, is_pkg, defs = funcs[key]
    m = key[0]
    local = dict(top); local.update(imports(m, list(ast.walk(n)), is_pkg))
    out = []
    for c in ast.walk(n):
        if not isinstance(c, ast.Call):
            continue
        fn = c.func
        if isinstance(fn, ast.Name):
            if fn.id in defs and isinstance(defs[fn.id], ast.FunctionDef):
                out.append((c.lineno, (m, fn.id)))
            elif fn.id in local and local[fn.id][0] == "fn":
                k = find(local[fn.id][1], local[fn.id][2])
                if k: out.append((c.lineno, k))
            if METHODS:  # a class's constructor
                k = (m, fn.id) if fn.id in defs else (find(local[fn.id][1], local[fn.id][2])
                                                     if fn.id in local and local[fn.id][0] == "fn" else None)
                if k and isinstance(funcs[k][0], ast.ClassDef) and (k[0], f"{k[1]}.__init__") in funcs:
                    out.append((c.lineno, (k[0], f"{k[1]}.__init__")))
        elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in local \
                and local[fn.value.id][0] == "mod":
            k = find(local[fn.value.id][1], fn.attr)
            if k: out.append((c.lineno, k))
        elif isinstance(fn, ast.Attribute) and METHODS:
            out.extend((c.lineno, k) for k in methods(key, fn))
    return [k for _, k in sorted(out) if isinstance(funcs[k][0], ast.FunctionDef)]
seen, walk = set(), []
def visit(k):
    seen.add(k); walk.append(k[0])
    for d in calls(k):
        if d not in seen:
            visit(d)
            if RETURNS:
                walk.append(k[0])  # back in the caller
sys.setrecursionlimit(10000)
import os
RETURNS = os.environ.get("RETURNS", "1") == "1"
m, _, fn = start.rpartition(".")
visit((m, fn))
stays = [walk[0]]
for x in walk[1:]:
    if x != stays[-1]:
        stays.append(x)
climbs = sum(1 for a, b in zip(stays, stays[1:]) if rank(b) < rank(a))
rets, left = 0, set()
for a, b in zip(stays, stays[1:]):
    left.add(a)
    if b in left: rets += 1
cnt = collections.Counter(stays)
up = sum(1 for k in seen for d in calls(k) if rank(d[0]) < rank(k[0]))
print(f"calls up a layer {up}; functions {len(seen)}, stays {len(stays)} in {len(cnt)} modules, climbs back up {climbs}, "
      f"returns {rets}, most entered: {cnt.most_common(3)}")
