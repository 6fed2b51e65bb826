"""Integrations with third-party systems, each behind its own optional extra.

- `agentlightning.contrib.runner.agentos.AgentOSRunner` and `agentlightning.contrib.reward.agentos.PolicyReward`:
  run agents under an Agent-OS kernel (extra `agentos`, the `agent-os-kernel` package) so that every tool
  call goes through the kernel's policy, and turn the violations into negative rewards.

Importing this package (or its modules) never imports the third-party packages; the classes do, when built.
"""
