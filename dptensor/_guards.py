"""What a fit runs under once it has spent: floating-point settings the library fixes, and silence.

After the spend, a fit's behaviour is a release: an error, a warning or a printed line that
depends on the data tells something about the data that no noise covers. Two things a user (or a
library the user loaded) sets would make it so:

* NumPy's floating-point error settings: under ``np.errstate(all="raise")`` an underflow that
  one tiny row causes raises ``FloatingPointError`` where its neighbour fits. :func:`fixed_floating_point`
  runs the fit under NumPy's default settings (warn on divide, overflow and invalid, ignore
  underflow), whatever the caller's are; the suite turns every such warning from dptensor into
  an error, so none is left on any path it tests.
* Output from code the fit calls but does not own: a pipeline step's ``verbose``, a user's
  estimator that prints, a library that logs or warns. :func:`silenced` swallows all of it
  (``sys.stdout``, ``sys.stderr``, ``warnings`` and ``logging``) for the duration of a block,
  say one run of a private search, whose number and outcome are secret.
"""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import sys
import warnings

import numpy as np

__all__ = ["fixed_floating_point", "silenced", "FLOATING_POINT_SETTINGS"]

#: NumPy's own defaults: the settings every fit runs under, whatever the caller's.
FLOATING_POINT_SETTINGS = dict(divide="warn", over="warn", under="ignore", invalid="warn")


def fixed_floating_point(func):
    """Decorate a public entry point (``fit``, ``partial_fit``, a spend) to run under
    :data:`FLOATING_POINT_SETTINGS`, whatever ``np.errstate`` the caller has set."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with np.errstate(**FLOATING_POINT_SETTINGS):
            return func(*args, **kwargs)
    wrapper.fixed_floating_point = True
    return wrapper


class _Sink(io.TextIOBase):
    """A text stream that keeps nothing."""

    def writable(self):
        return True

    def write(self, text):
        return len(text)


@contextlib.contextmanager
def silenced():
    """Nothing inside reaches ``sys.stdout``, ``sys.stderr``, ``warnings`` or ``logging``.

    ``logging`` is switched off for the block (``logging.disable``) and restored after; warnings
    are caught and dropped (``warnings.catch_warnings``). Not thread-safe, like the
    standard library's redirections it uses: the block's own process is the one silenced.
    """
    sink = _Sink()
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
        if sys.stdout is sink or sys.stderr is sink:  # pragma: no cover - the redirections restore
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
