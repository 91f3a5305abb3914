"""The ProfilesReceiver capsule that pyroscope.ebpf forwards to (pyroscope.write, local store)."""

from __future__ import annotations

from typing import Callable

from ...profile.model import Profile
from ..syntax.values import Capsule


class ProfilesReceiver(Capsule):
    capsule_type = "ProfilesReceiver"

    def __init__(self, owner: str, append: Callable[[dict[str, str], bytes, Profile | None], bool],
                 append_many: Callable[[list[tuple[dict[str, str], bytes, Profile | None]]], list[bool]] | None = None
                 ) -> None:
        self.owner = owner
        self._append = append
        self._append_many = append_many

    def append(self, labels: dict[str, str], raw_profile: bytes, profile: Profile | None = None) -> bool:
        """Hand over one gzipped pprof with its series labels; False when it was dropped."""
        return self._append(labels, raw_profile, profile)

    def append_many(self, items: list[tuple[dict[str, str], bytes, Profile | None]]) -> list[bool]:
        """Hand over one interval's profiles at once (a receiver may send them together); one
        True/False (dropped) per item."""
        if self._append_many is not None:
            return self._append_many(items)
        return [self._append(labels, raw, profile) for labels, raw, profile in items]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProfilesReceiver) and other.owner == self.owner

    def __hash__(self) -> int:
        return hash(self.owner)

    def __repr__(self) -> str:
        return f"<ProfilesReceiver {self.owner}>"
