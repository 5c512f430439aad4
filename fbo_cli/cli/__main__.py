"""``python -m fbo_cli.cli``: the ``fbo`` command."""

from . import main

main()
