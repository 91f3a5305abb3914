"""The real runtimes come from tests/runtime_fixtures.py; the agent and Pyroscope peers of
tests/alloy serve the end-to-end tests against a real engine."""

from ..alloy.conftest import agent, pyroscope  # noqa: F401
