"""A user's pipeline step that talks: prints, writes to the descriptors, warns and logs.

In a module of its own, light to import: joblib's worker processes import it to unpickle it.
"""
import logging
import os
import sys
import warnings

from sklearn.base import BaseEstimator


class Records(logging.Handler):
    """Keeps its records, and writes each to file descriptor 2 (seen from a worker process too)."""

    records = []

    def emit(self, record):
        self.records.append(record)
        os.write(2, f"logged: {record.getMessage()}\n".encode())


LOG = logging.getLogger("tests.chatty_step")
LOG.addHandler(Records())
LOG.propagate = False


class Chatty(BaseEstimator):
    """Stateless (nothing to fit); its transform talks on every channel and returns X."""

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        print("chatty: print")
        sys.stderr.write("chatty: stderr\n")
        os.write(1, b"chatty: descriptor 1\n")
        warnings.warn("chatty: warning")
        LOG.warning("chatty: record")
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags
