"""`agl prometheus`: serve the metrics that several processes wrote to `PROMETHEUS_MULTIPROC_DIR`.

Processes using `PrometheusMetricsBackend` with `PROMETHEUS_MULTIPROC_DIR` set write their values to
that directory; this command aggregates them into one scrape endpoint for Prometheus.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from ._logging import LOG_LEVELS, setup_cli_logging

__all__ = ["build_parser", "build_app", "main"]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agl prometheus",
        description=(
            "Serve Prometheus metrics aggregated from every process that writes to $PROMETHEUS_MULTIPROC_DIR "
            "(set it to the same directory for the store server, runners and this command)."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=4748, help="port to listen on (default 4748)")
    parser.add_argument(
        "--metrics-path", default="/v1/prometheus", help="URL path of the scrape endpoint (default /v1/prometheus)"
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="INFO", help="log verbosity (default INFO)")
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request")
    return parser


def build_app(metrics_path: str, multiproc_dir: str) -> Any:
    """A Starlette app serving the multiprocess registry at `metrics_path` (plus `/health`)."""
    try:
        import prometheus_client
        from prometheus_client import multiprocess
    except ImportError as exc:
        raise SystemExit("agl prometheus needs prometheus-client: pip install agentlightning[prometheus]") from exc
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def metrics(_request: Request) -> Response:
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)  # type: ignore[no-untyped-call]
        return Response(prometheus_client.generate_latest(registry), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    path = "/" + metrics_path.strip("/")
    return Starlette(routes=[Route(path, metrics), Route("/health", health)])


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not multiproc_dir or not os.path.isdir(multiproc_dir):
        print(
            "agl prometheus: set PROMETHEUS_MULTIPROC_DIR to an existing directory shared with the processes "
            f"that record metrics (got {multiproc_dir!r})",
            file=sys.stderr,
        )
        return 2
    from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs

    setup_cli_logging(args.log_level)
    launcher = PythonServerLauncher(
        build_app(args.metrics_path, multiproc_dir),
        PythonServerLauncherArgs(
            host=args.host,
            port=args.port,
            launch_mode="asyncio",
            healthcheck_url="/health",
            log_level=getattr(logging, args.log_level),
            access_log=args.access_log,
        ),
    )

    async def serve() -> None:
        await launcher.start()
        logger.info("Prometheus metrics at %s%s", launcher.access_endpoint, "/" + args.metrics_path.strip("/"))
        await launcher.run_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError) as exc:
        logging.getLogger("agentlightning").error("agl prometheus: %s", exc)
        return 1
    return 0
