"""`agl export` / `agl import`: a store's trajectories to a parquet dataset, and such a file into a store.

The store is the one `agl store` serves (`--store-url`) or a database opened directly (`--backend sqlite
--path FILE`, `--backend postgres --dsn ...`). Columns: see `agentlightning.export.schema.COLUMNS`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from .store import BACKENDS, DEFAULT_SQLITE_PATH, build_store

__all__ = ["export_main", "import_main"]


def _store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-url", help="the store served by `agl store` at this URL")
    parser.add_argument("--store-token", default=os.environ.get("AGL_STORE_TOKEN"), help="bearer token of --store-url")
    parser.add_argument("--backend", choices=[b for b in BACKENDS if b != "memory"], default="sqlite")
    parser.add_argument("--path", default=DEFAULT_SQLITE_PATH, help="SQLite file for --backend sqlite")
    parser.add_argument("--dsn", default=os.environ.get("AGL_POSTGRES_DSN"), help="DSN for --backend postgres")


def _open_store(args: argparse.Namespace) -> Any:
    if args.store_url:
        from agentlightning.store_http.client import LightningStoreClient

        return LightningStoreClient(args.store_url, auth_token=args.store_token)
    return build_store(args)


async def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        await close()


def export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agl export", description="Export a store's rollouts to a parquet dataset.")
    parser.add_argument("output", help="parquet file to write")
    _store_arguments(parser)
    parser.add_argument("--aggregation", choices=("trajectory", "transition"), default="trajectory")
    parser.add_argument(
        "--status", action="append", default=None, help="rollout statuses to export (repeatable; default succeeded)"
    )
    parser.add_argument(
        "--tokenizer", help="Hugging Face tokenizer (local path or cached id) to retokenize calls recorded without ids"
    )
    return parser


async def _export(args: argparse.Namespace) -> int:
    from agentlightning.export import exportable_rows, rows_from_store, write_parquet

    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    store = _open_store(args)
    try:
        rows = await rows_from_store(
            store, tokenizer=tokenizer, aggregation=args.aggregation, statuses=args.status or ["succeeded"]
        )
    finally:
        await _close(store)
    rows, refused = exportable_rows(rows)
    for message in refused:
        print(f"agl export: {message}", file=sys.stderr, flush=True)
    path = write_parquet(rows, args.output)
    rollouts = len({row["rollout_id"] for row in rows})
    also = f" ({len(refused)} row(s) refused, see above)" if refused else ""
    print(f"agl export: {len(rows)} row(s) from {rollouts} rollout(s) written to {path}{also}", flush=True)
    return 0


def export_main(argv: Optional[Sequence[str]] = None) -> int:
    return asyncio.run(_export(export_parser().parse_args(argv)))


def import_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agl import", description="Import a parquet dataset into a store.")
    parser.add_argument("input", help="parquet file written by `agl export`")
    _store_arguments(parser)
    return parser


async def _import(args: argparse.Namespace) -> int:
    from agentlightning.export import check_rows, import_rows, read_parquet

    try:
        rows = read_parquet(args.input)
    except ValueError as exc:
        print(f"agl import: {exc}", flush=True)
        return 2
    try:
        check_rows(rows)  # before the store is opened: a bad file writes nothing
    except ValueError as exc:
        print(f"agl import: {args.input}: {exc}", flush=True)
        return 2
    store = _open_store(args)
    try:
        report = await import_rows(store, rows)
    finally:
        await _close(store)
    skipped = f"; {len(report.existing)} rollout(s) already in the store, skipped" if report.existing else ""
    print(f"agl import: {len(rows)} row(s) imported as {len(report.created)} rollout(s){skipped}", flush=True)
    return 0


def import_main(argv: Optional[Sequence[str]] = None) -> int:
    return asyncio.run(_import(import_parser().parse_args(argv)))
