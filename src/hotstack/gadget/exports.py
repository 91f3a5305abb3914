"""What a gadget run sends out besides its terminal output: OTLP profiles and files.

Everything here is set up (and every config error raised) before sampling starts, and closed,
with a flush deadline, when it ends.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from ..export.delivery import FLUSH_DEADLINE_S, close_together
from ..profile.model import Profile
from .datasource import DataSource

if TYPE_CHECKING:
    from ..export.otlp_grpc import OtlpProfilesExporter
    from .otel_profiles import OtelProfilesOperator

log = logging.getLogger("hotstack.export")


class RunExports:
    def __init__(self, ds: DataSource, *, config: str | None, exporter_flag: str, sanitize: bool,
                 file_path: str = "", file_format: str = "") -> None:
        # Imported only when asked for: gRPC, protobuf, TLS and YAML cost ~0.1 CPU-s of start-up
        # (bench/startup.py) that a plain `hotstack run` does not need.
        if file_path:
            from ..export.files import ProfileFile
        if config is not None or exporter_flag:
            from ..export.otlp_grpc import OtlpProfilesExporter
            from .igconfig import load_config, profile_exporters, select_exporters
            from .otel_profiles import OtelProfilesOperator
        self.file = ProfileFile(file_path, file_format) if file_path else None
        self.exporters: list[OtlpProfilesExporter] = []
        self.operator: OtelProfilesOperator | None = None
        configured = profile_exporters(load_config(config), config) if config is not None else {}
        selected = select_exporters(exporter_flag, ds.name, configured, config) if exporter_flag else []
        if selected:
            # The operator checks the annotations (and sanitize collisions) before any channel opens.
            OtelProfilesOperator(ds, [], sanitize=sanitize)
            self.exporters = [OtlpProfilesExporter(cfg) for cfg in selected]
            self.operator = OtelProfilesOperator(ds, self.exporters, sanitize=sanitize)

    def emit(self, profile: Profile) -> None:
        if self.operator is not None:
            self.operator.export(profile)
        if self.file is not None:
            self.file(profile)

    def close(self, deadline_s: float = FLUSH_DEADLINE_S, write_empty_file: bool = True) -> None:
        close_together([e.close for e in self.exporters], deadline_s)   # one deadline for all
        for exporter in self.exporters:
            m = exporter.metrics.snapshot()
            if m["dropped_items"] or exporter.rejected:
                log.warning("otel-profiles exporter %s: %d profile(s) sent, %d dropped, %d rejected by %s",
                            exporter.cfg.name, m["sent_items"], m["dropped_items"], exporter.rejected,
                            exporter.cfg.endpoint)
        if self.file is not None:
            said = self.file.finish(write_empty_file)   # an empty file is still a valid one
            if said:
                print(said, file=sys.stderr)
