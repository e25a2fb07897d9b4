"""The command line from Python: `python -m spattn VERB ...` and the `spattn` script pip
installs run the `spattn` executable built with the package (spattn/_bin/spattn), with the
same arguments, streams and exit code."""
import os
import sys
from pathlib import Path


def executable():
    """The path of the package's `spattn` executable (it may be missing: see main)."""
    return Path(__file__).resolve().parent / "_bin" / "spattn"


def main(argv=None):
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.exit(f"spattn: the command line is not in this package ({exe}); install the "
                 f"package with pip (docs/python.md) or build it with `make build`")
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [str(exe), *args])  # this process becomes the command: signals, stdin, code
