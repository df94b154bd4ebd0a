"""``python -m pyg_dist`` runs the ``pyg-dist`` command line."""

import sys

from pyg_dist.cli import main

sys.exit(main())
