"""The errors of the cloud side: one base, so that one handler in ``dpsense`` reports them.

    try:
        store = open_analyst_store(url)
    except DpsenseError as err:          # StorageError, BrokerError, BudgetError, ...
        print("dpsense status: %s" % err, file=sys.stderr)

Every message is one line that says what is wrong and, where it can, what to do. Modules
raise the subclass that names the part that failed; where a library error crosses into
our code it is translated there, ``raise StorageError(...) from err``. Classes that are
also ``ValueError`` (or ``ConnectionError``) keep the semantics callers and tests rely on.
``BudgetError`` (privacy/accountant.py) and the data and demo errors derive from the base
too.
"""
from __future__ import annotations

import random


class DpsenseError(Exception):
    """Base of the errors the ``dpsense`` command reports in one line (exit status 2; 1 for a
    ``RefusedError``)."""


class RefusedError(DpsenseError):
    """A request the policy refuses, not a bad value: a privacy budget that would be exceeded, a
    data set or budget database that does not exist. ``dpsense`` exits with status 1 for it."""


class UsageError(DpsenseError, ValueError):
    """A setting or argument value is not acceptable; the text names it."""


class StorageError(DpsenseError):
    """A database could not be opened, read or written; the text says which and why."""


class StorageUnavailable(StorageError):
    """The database is busy, locked or out of reach for now: the same call may succeed later
    (the ingest retries it). A damaged store or a schema mismatch is a plain StorageError."""


class BrokerError(DpsenseError):
    """The broker could not be configured or started; the text says what to do."""


class BrokerUnreachable(BrokerError, ConnectionError):
    """A service could not open its MQTT session: nothing listens, the broker refused the
    account, or it did not answer in time."""


class RoundError(DpsenseError, ValueError):
    """A correction round failed: a message that cannot be understood, a refusal by the
    correction server, or no answer in time."""


class ServiceError(DpsenseError):
    """A running service had to stop: a part of it met an error that must not be retried."""


def backoff_delay(previous: float, first: float, most: float) -> float:
    """The next wait before retrying a passing fault: ``first`` after none, then doubling up to
    ``most``, each with up to 25% random jitter so that services that lost the same database or
    broker at once do not all come back at the same moment. Callers wait with an interruptible
    wait (``stop.wait(delay)``), so a stop is never delayed by a backoff."""
    if not 0 < first <= most:
        raise ValueError("need 0 < first <= most")
    base = first if previous <= 0 else min(most, 2 * previous)
    return min(most, base * (1 + 0.25 * random.random()))
