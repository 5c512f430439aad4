"""``python -m fbo_cli``: the ``fbo`` command without its console script (e.g. on a machine where the
package is on ``PYTHONPATH`` but not installed)."""

from .cli import main

main()
