"""Spies on completion fits: a name patched in every module of the completion layer that holds it.

The completion algorithms live in several modules (:mod:`dptensor.algorithms.completion` and its
modes), each holding its own reference to what it calls (a release, ``Observations``,
``spectral_start``): a spy must replace every one of them to see every call.
"""
from __future__ import annotations

import importlib
import pkgutil

import dptensor.algorithms.completion as package
import dptensor.completion


def completion_modules():
    """The estimator's module and every module (not package) of the completion layer."""
    found = [dptensor.completion]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.ispkg:
            found.append(importlib.import_module(info.name))
    return found


def patch_everywhere(monkeypatch, name, value):
    """``monkeypatch.setattr`` of ``name`` in every completion module that holds it."""
    patched = [m for m in completion_modules() if hasattr(m, name)]
    assert patched, name
    for module in patched:
        monkeypatch.setattr(module, name, value)
