"""`python -m agentlightning.cli ...` is the same as `agl ...`."""

import sys

from . import main

sys.exit(main())
