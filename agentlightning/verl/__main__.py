"""`python -m agentlightning.verl key=value ...` (see `agentlightning.verl.launch`)."""

import sys

from agentlightning.verl.launch import main

sys.exit(main())
