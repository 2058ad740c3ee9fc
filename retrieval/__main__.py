"""`python -m retrieval ...`, the same as the `retrieval` command; what `torchrun -m retrieval train ...` starts."""

import sys

from retrieval.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
