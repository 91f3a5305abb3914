"""`hotstack agent [CONFIG.alloy]`: flags and wiring only."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys

from ..errors import ConfigError
from ..text import EscapingFormatter
from .server import DEFAULT_LISTEN


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", metavar="CONFIG.alloy",
                        help="Alloy config file (default: a built-in pipeline profiling every process into "
                             "a local store)")
    parser.add_argument("--validate", action="store_true",
                        help="parse and type-check the config, start nothing (exit 0, or 2 with the errors)")
    parser.add_argument("--server.http.listen-addr", dest="listen_addr", default=DEFAULT_LISTEN, metavar="ADDR",
                        help=f"address of the HTTP server (/metrics, component pages) (default {DEFAULT_LISTEN})")
    parser.add_argument("--storage.path", dest="storage_path", default="", metavar="DIR",
                        help="directory of the built-in pipeline's pprof files "
                             "(default ~/.local/state/hotstack/profiles)")
    parser.add_argument("--duration", type=float, default=0, metavar="SECONDS",
                        help="stop after this many seconds (default: run until SIGTERM/SIGINT)")
    parser.add_argument("--log.level", dest="log_level", default="info",
                        choices=("debug", "info", "warn", "error"), help="log level (default info)")
    parser.add_argument("--print-default-config", action="store_true", help="print the built-in config and exit")


def _read_config(args) -> tuple[str, str]:
    from .default_config import default_config
    if not args.config:
        return default_config(args.storage_path), "<built-in>"
    return read_config_file(args.config), args.config


def read_config_file(path: str) -> str:
    """The text of a config file, read no further than the size limit (an 11 GB file is refused
    after reading 2 MiB of it, not after filling the memory)."""
    from .syntax.parser import MAX_CONFIG_BYTES, check_size
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    check_size(max(size, len(raw)), path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"config {path} is not UTF-8 text (byte {raw[e.start]:#04x} at line {line})") from None


def run(args) -> int:
    level = {"warn": "WARNING"}.get(args.log_level, args.log_level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("ts=%(asctime)s level=%(levelname)s component=%(name)s msg=%(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if not (math.isfinite(args.duration) and 0 <= args.duration <= 366 * 86400):
        raise ConfigError(f"--duration {args.duration}: expected 0 (until SIGTERM) or a number of seconds "
                          f"up to 366 days")
    text, filename = _read_config(args)
    if args.print_default_config:
        sys.stdout.write(text)
        return 0
    if args.validate:
        from .controller import load_config
        controller = load_config(text, filename)
        print(f"{filename}: OK ({len(controller.order)} components)")
        return 0
    from .agent import Agent
    Agent(text, filename, args.listen_addr, read_config=lambda: _read_config(args)[0]).run(args.duration)
    # Every component is stopped and every exporter flushed: leave now. Tearing down the heap of a
    # long run (symbol tables, BPF map views) took seconds on a busy host after a SIGTERM.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
