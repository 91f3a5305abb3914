"""Profiles: the data model (Sample, Frame, Profile) and its encoders."""

from .model import (CPU_PERIOD_TYPE, CPU_SAMPLE_TYPE, UNKNOWN, Frame, FrameKind, Profile, ProfileStats, Sample,
                    ValueType)

__all__ = ["CPU_PERIOD_TYPE", "CPU_SAMPLE_TYPE", "UNKNOWN", "Frame", "FrameKind", "Profile", "ProfileStats",
           "Sample", "ValueType"]
