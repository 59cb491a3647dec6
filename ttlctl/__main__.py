"""``python -m ttlctl``: the ``ttlctl`` command, as the console script runs it (one line
saying what to install when the command line's packages are missing)."""

from ttlctl.launcher import main

if __name__ == "__main__":
    main()
