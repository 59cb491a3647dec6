"""``python -m ttlctl.cli``: the ``ttlctl`` command."""

from ttlctl.cli import main

main()
