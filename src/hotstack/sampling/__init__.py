"""The profiling session: configures BPF, drains it every interval, yields raw samples."""

from .session import RawBatch, RawSample, SamplerConfig, SamplingSession, StackSnapshot

__all__ = ["RawBatch", "RawSample", "SamplerConfig", "SamplingSession", "StackSnapshot"]
