"""``python -m iggy_local``: run the local Iggy-protocol broker in the foreground.

Logs "listening on HOST:PORT" to stderr once it accepts connections (``LocalIggy`` waits for
that line) and exits cleanly, status 0, on SIGTERM or SIGINT. The password defaults to the
``IGGY_LOCAL_PASSWORD`` environment variable, else ``iggy``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from .dialects import DIALECTS, SERVER_ENV, dialect
from .runner import PASSWORD_ENV
from .server import run_broker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m iggy_local",
        description="Local single-process broker speaking Apache Iggy's TCP protocol.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=8090, help="TCP port, 0 picks a free one (default %(default)s)"
    )
    parser.add_argument(
        "--data-dir", help="directory for the fsynced journal; omit to keep everything in memory"
    )
    parser.add_argument("--username", default="iggy", help="login user (default %(default)s)")
    parser.add_argument(
        "--password", default=os.environ.get(PASSWORD_ENV, "iggy"),
        help=f"login password (default ${PASSWORD_ENV}, else iggy)",
    )
    parser.add_argument(
        "--server", choices=list(DIALECTS), default=os.environ.get(SERVER_ENV) or "0.9",
        help=f"Iggy server line whose protocol it speaks (default ${SERVER_ENV}, else 0.9)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default %(default)s)",
    )
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await run_broker(
        data_dir=args.data_dir, host=args.host, port=args.port, username=args.username,
        password=args.password, stop=stop, dialect=dialect(args.server),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(_serve(args))
    logging.getLogger(__name__).info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
