"""The nas package's space provider, registered in-process: tests run from a source checkout
whose installed package metadata (its entry points) may be older than the code."""
from __future__ import annotations


def pytest_configure(config) -> None:  # noqa: ARG001 - the pytest hook's signature
    from nas.sources import register

    register()
