"""structlog setup for the daemon: JSON lines in production, a console renderer locally.

librdkafka's own log lines (the confluent-kafka clients are given stdlib loggers under
``rlm.kafka`` and ``rlmm.kafka`` via their ``logger=`` setting) are re-emitted as the structlog
event ``kafka_client_log`` and rate-limited per (client, facility): an unreachable bootstrap
server otherwise produces thousands of identical ``FAIL`` lines.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

import structlog

KAFKA_LOGGERS = ("rlm.kafka", "rlmm.kafka")


class RateLimitedKafkaHandler(logging.Handler):
    """Forwards librdkafka lines to structlog: at most one per (logger, facility) per ``period_s``;
    the next one that passes says how many were suppressed in between."""

    def __init__(self, period_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.period_s = period_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._lock2 = threading.Lock()
        self._log = structlog.get_logger("rlm.kafka")

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        facility = str(args[0]) if args else ""
        key = (record.name, facility)
        now = self._clock()
        with self._lock2:
            last = self._last.get(key)
            if last is not None and now - last < self.period_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if record.levelno >= logging.ERROR:
            emit = self._log.error
        elif record.levelno >= logging.WARNING:
            emit = self._log.warning
        else:
            emit = self._log.info
        emit(
            "kafka_client_log",
            client=record.name,
            facility=facility,
            message=record.getMessage(),
            suppressed=suppressed,
        )


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    """Route structlog (and stdlib logging) to stderr with ISO timestamps and the thread name."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    handler = RateLimitedKafkaHandler()
    for name in KAFKA_LOGGERS:
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            if isinstance(h, RateLimitedKafkaHandler):
                lg.removeHandler(h)
        lg.addHandler(handler)
        lg.propagate = False
        lg.setLevel(logging.INFO if lvl <= logging.INFO else lvl)

    def add_thread(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
        event.setdefault("thread", threading.current_thread().name)
        return event

    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_thread,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
