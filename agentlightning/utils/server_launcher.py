"""v0.3's import path of the server launcher; the code lives in `agentlightning.web.launcher`."""

from agentlightning.web.launcher import (
    LaunchMode,
    PortInUseError,
    PythonServerLauncher,
    PythonServerLauncherArgs,
    pick_free_port,
)

__all__ = ["LaunchMode", "PortInUseError", "PythonServerLauncher", "PythonServerLauncherArgs", "pick_free_port"]
