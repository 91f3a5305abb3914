"""The Engine: one validated config, the BPF samplers it loads and drains, one Profile per
sampler per interval. Used by every gadget and by the agent's pyroscope.ebpf."""

from .config import EngineConfig
from .engine import Engine

__all__ = ["Engine", "EngineConfig"]
