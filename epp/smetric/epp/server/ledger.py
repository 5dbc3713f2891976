"""Moved to :mod:`smetric.router.ledger` (the router core shared with the simulator); re-exported here."""

from smetric.router.ledger import DispatchLedger, LedgerEntry

__all__ = ["DispatchLedger", "LedgerEntry"]
