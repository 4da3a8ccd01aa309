"""python -m kfuse: the command line (kfuse.cli)."""

import sys

from kfuse.cli import main

if __name__ == "__main__":
    sys.exit(main())
