"""`python -m scaleagent.cli`: the `scale-agent` command without its entry point script."""

import sys

from . import main

sys.exit(main())
