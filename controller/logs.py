"""structlog set-up: JSON lines in a cluster, readable console output locally.

Reconciles bind `mpijob=<ns>/<name>` with structlog's contextvars, so every line logged while an
MPIJob is reconciled carries it, however deep the call. The informers log through the standard
`logging` module (they do not depend on the controller); their records go through the same
processors and renderer, so with `--log-format=json` every line is JSON, a traceback included.
"""

from __future__ import annotations

import logging
import sys
import threading

import structlog

_SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _renderer(fmt: str) -> structlog.typing.Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())


def _stdlib_handler(fmt: str) -> logging.Handler:
    """A handler rendering `logging` records like structlog's own lines (logger name as `logger`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_SHARED, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, _renderer(fmt)],
    ))
    return handler


def _thread_died(args: threading.ExceptHookArgs) -> None:
    """A thread that dies of an exception: one log line with its traceback, not bare text."""
    if args.exc_type is SystemExit:
        return
    logging.getLogger("controller.threads").error(
        "thread %s died", getattr(args.thread, "name", "?"),
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]


def setup(fmt: str = "console", level: str = "info") -> None:
    lvl = getattr(logging, level.upper())
    root = logging.getLogger()
    root.handlers[:] = [_stdlib_handler(fmt)]
    root.setLevel(lvl)
    # urllib3 warns on every retried connection; our own logs say what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.captureWarnings(True)  # Python warnings as log lines too, not bare text
    threading.excepthook = _thread_died
    structlog.configure(
        processors=[
            *_SHARED,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            _renderer(fmt),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # WriteLogger writes each line, newline included, in one call; PrintLogger's print() makes
        # two, between which another thread's line (the informers' handler) could land.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
