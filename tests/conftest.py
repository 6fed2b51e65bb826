"""Suite-wide settings: nothing the tests import may reach the internet."""

from __future__ import annotations

import os

# LiteLLM downloads a model price list when imported unless told to use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
