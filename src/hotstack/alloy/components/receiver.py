"""The ProfilesReceiver capsule that pyroscope.ebpf forwards to (pyroscope.write, local store)."""

from __future__ import annotations

from typing import Callable

from ...profile.model import Profile
from ..syntax.values import Capsule


class ProfilesReceiver(Capsule):
    capsule_type = "ProfilesReceiver"

    def __init__(self, owner: str, append: Callable[[dict[str, str], bytes, Profile | None], bool]) -> None:
        self.owner = owner
        self._append = append

    def append(self, labels: dict[str, str], raw_profile: bytes, profile: Profile | None = None) -> bool:
        """Hand over one gzipped pprof with its series labels; False when it was dropped."""
        return self._append(labels, raw_profile, profile)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProfilesReceiver) and other.owner == self.owner

    def __hash__(self) -> int:
        return hash(self.owner)

    def __repr__(self) -> str:
        return f"<ProfilesReceiver {self.owner}>"
