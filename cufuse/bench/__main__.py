"""``python -m cufuse.bench``: see ``cufuse.bench.cli``."""
import sys

from .cli import main

sys.exit(main())
