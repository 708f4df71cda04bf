"""structlog set-up: JSON lines in a cluster, readable console output locally.

Reconciles bind `mpijob=<ns>/<name>` with structlog's contextvars, so every line logged while an
MPIJob is reconciled carries it, however deep the call.
"""

from __future__ import annotations

import logging
import sys

import structlog


def setup(fmt: str = "console", level: str = "info") -> None:
    lvl = getattr(logging, level.upper())
    logging.basicConfig(stream=sys.stderr, level=lvl, format="%(message)s")
    # urllib3 warns on every retried connection; our own logs say what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
