"""pytest plugin of ``tools/owner_tests.py``: with ``PMFAST_OWNER_PATCHES=1``, every pmfast patch for the session."""

import os

_scopes = []


def pytest_configure(config):
    if os.environ.get("PMFAST_OWNER_PATCHES") != "1":
        return
    from pmfast.compiler import install_everywhere

    _scopes.append(install_everywhere())
    _scopes[-1].__enter__()


def pytest_unconfigure(config):
    while _scopes:
        _scopes.pop().__exit__(None, None, None)
