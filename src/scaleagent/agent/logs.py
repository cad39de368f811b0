"""The agent's log lines as its `logging` section says: text or JSON (one object a line, as
Armory's logrus writes them: `time`, `level`, `msg`, plus `logger` and the configured `fields`),
to standard error, to a rotated file, or to both (`multiWrite`).

Configured once the file is read, so that the lines of a running agent take the form a log
pipeline expects; the few lines before that (the file's own warnings) are in the CLI's text form.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import time
from typing import Any

import orjson

from ..kube.credentials import service_account_namespace
from .config import LoggingConfig

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _fields(config: LoggingConfig) -> dict[str, Any]:
    """The configured extra fields; `agentNamespace` left empty is filled with the pod's
    namespace, as Armory does (its `agentCluster` has no source here and stays as given)."""
    fields = dict(config.fields)
    if "agentNamespace" in fields and fields["agentNamespace"] == "":
        fields["agentNamespace"] = service_account_namespace() or ""
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object a line; never more than one line, whatever the message holds."""

    def __init__(self, fields: dict[str, Any], local_time: bool) -> None:
        super().__init__()
        self.fields = fields
        self.local_time = local_time

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.localtime(record.created) if self.local_time else time.gmtime(record.created)
        zone = time.strftime("%z", stamp) if self.local_time else "+0000"
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", stamp) + f".{int(record.msecs):03d}{zone[:3]}:{zone[3:]}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        for key, value in self.fields.items():
            doc.setdefault(key, value)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    """The CLI's text lines, with the configured fields at the end as key=value."""

    def __init__(self, fields: dict[str, Any], local_time: bool) -> None:
        super().__init__(TEXT_FORMAT)
        self.fields = fields
        if not local_time:
            self.converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if self.fields:
            line += " " + " ".join(f"{k}={v}" for k, v in self.fields.items())
        return line


def configure_logging(config: LoggingConfig, cli_level: str | None = None) -> None:
    """Replace the root logger's handlers as `config` says. The level is the file's `level` when
    set, else `cli_level` (the --log-level option), else what the root logger has."""
    fields = _fields(config)
    formatter: logging.Formatter = (
        JsonFormatter(fields, config.local_time)
        if config.format == "json"
        else TextFormatter(fields, config.local_time)
    )
    handlers: list[logging.Handler] = []
    if config.file is not None:
        config.file.parent.mkdir(parents=True, exist_ok=True)
        if config.max_size_mb > 0:
            handlers.append(
                logging.handlers.RotatingFileHandler(
                    config.file, maxBytes=config.max_size_mb * 1024 * 1024, backupCount=config.max_backups
                )
            )
        else:
            handlers.append(logging.FileHandler(config.file))
    if config.file is None or config.multi_write:
        handlers.append(logging.StreamHandler(sys.stderr))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    level = config.level or cli_level
    if level:
        root.setLevel(level)
