"""The v0.1 stack: the task server (`server.AgentLightningServer`) and its client (`client.AgentLightningClient`,
`client.DevTaskLoader`), deprecated since v0.2 and kept for v0.1/v0.3 code.

Only the top floor imports this package: the old paths `agentlightning.server` / `agentlightning.client` and
`agentlightning.trainer.legacy` (`Trainer.fit_v0`, `Trainer.fit(agent, <server URL>)`). The v0.1 runner
`LegacyAgentRunner` lives at its own old path, `agentlightning.runner.legacy`.
"""
