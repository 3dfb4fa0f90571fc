"""``python -m pytest_llmsim.cli``: the ``llmsim`` command."""

import sys

from . import main

sys.exit(main())
