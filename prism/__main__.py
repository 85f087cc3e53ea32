"""`python -m prism` runs the command line."""

import sys

from prism.cli import main

sys.exit(main())
