"""Suite-wide settings: nothing the tests import may reach the internet, and Ctrl-C reaches every child."""

from __future__ import annotations

import os
import signal

# LiteLLM downloads a model price list when imported unless told to use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# A shell without job control starts background jobs (`make test &`, `nohup ... &`) with SIGINT ignored,
# and an ignored signal stays ignored across exec: every `agl` process a test starts would then ignore the
# SIGINT that tests send to stop it (Python installs its KeyboardInterrupt handler only when SIGINT is not
# ignored at startup). A handler, unlike SIG_IGN, is reset to the default at exec, so children start clean.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
