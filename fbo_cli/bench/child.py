"""One side of ``fbo bench --against``, run as a script in a fresh process:
``python child.py TREE BENCH_DIR OPTIONS_JSON`` puts TREE's ``fbo_cli`` first on the path (ahead of the
working directory and of an editable install), loads the bench package in BENCH_DIR as its
``fbo_cli.bench`` and runs it with OPTIONS_JSON (:class:`fbo_cli.bench.BenchOptions`), so that both sides
are timed by the same instrument, each on its own code."""

import importlib.util
import json
import sys
from pathlib import Path

if __name__ == "__main__":
    tree, bench_dir, options = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), json.loads(sys.argv[3])
    sys.path[0] = str(tree)  # not this folder: its modules are the bench's, loaded below as a package
    import fbo_cli

    assert Path(fbo_cli.__file__).resolve().parent == tree / "fbo_cli", fbo_cli.__file__
    spec = importlib.util.spec_from_file_location("fbo_cli.bench", bench_dir / "__init__.py",
                                                  submodule_search_locations=[str(bench_dir)])
    bench = sys.modules["fbo_cli.bench"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(bench.BenchOptions(**options))
