"""``python -m cfgzip_lab.cli``: the same ``main`` as the ``cfgzip-lab`` script."""

import sys

from . import main

sys.exit(main())
