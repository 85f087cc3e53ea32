"""`python -m prism` runs the command line."""

import sys

try:
    from prism.cli import main
except KeyboardInterrupt:  # Ctrl-C this early still gets one line, not a traceback
    print("prism: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
