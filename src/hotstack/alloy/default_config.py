"""The pipeline `hotstack agent` runs without a config file: every process of this host,
profiled into a local store that the agent's HTTP server shows as a flame graph."""

from __future__ import annotations

import json

TEMPLATE = """\
// hotstack's built-in pipeline: all processes -> service_name from the executable -> pyroscope.ebpf -> local store.
discovery.process "all" {
  refresh_interval = "15s"
}

// service_name = the executable's file name (without it every process is "unspecified").
discovery.relabel "services" {
  targets = discovery.process.all.targets
  rule {
    action        = "replace"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/([^/]+)$"
    target_label  = "service_name"
  }
}

pyroscope.ebpf "default" {
  targets          = discovery.relabel.services.output
  forward_to       = [hotstack.local_store.default.receiver]
  collect_interval = "15s"
}

hotstack.local_store "default" {
  directory = %(directory)s
  retention = "1h"
  window    = "15m"
}
"""


def default_config(directory: str = "") -> str:
    # json.dumps escapes a path the way an Alloy string literal reads it back.
    return TEMPLATE % {"directory": json.dumps(directory)}
