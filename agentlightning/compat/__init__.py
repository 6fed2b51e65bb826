"""Backward compatibility with v0.1 and v0.3 code, kept in one package that the core never imports.

Each module serves one old import path (`agentlightning.X.Y` -> `agentlightning.compat.X_Y`); the old
path stays a thin module that re-exports from here:

| old path                                  | here                     | what                                  |
|-------------------------------------------|--------------------------|---------------------------------------|
| `agentlightning.types.Hook`               | `types_core`             | alias of `agentlightning.runner.Hook` |
| `agentlightning.store.client`             | `store_client`           | `LightningStoreClient` (store_http)   |
| `agentlightning.store.server`             | `store_server`           | `LightningStoreServer` (store_http)   |
| `agentlightning.store.client_server`      | `store_client_server`    | both of the above                     |
| `agentlightning.store.collection_based`   | `store_collection_based` | `CollectionBasedLightningStore`       |
| `agentlightning.client` / `.server`       | `client` / `server`      | the v0.1 task server and client       |
| `agentlightning.runner.legacy`            | `runner_legacy`          | `LegacyAgentRunner` (v0.1 runner)     |
| `agentlightning.trainer.legacy`           | `trainer_legacy`         | `Trainer.fit_v0` and v0.1 `fit` calls |

Importing this package imports none of them; each loads on first use.
"""
