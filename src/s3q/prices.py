"""What store requests cost: the prices ``s3q bench`` and the broker's dashboard reckon with."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidConfig

MONTH = 30 * 86400.0  # seconds in the month a monthly estimate means


@dataclass(frozen=True, slots=True)
class Prices:
    """Dollars per 1,000 requests. The defaults are S3 Standard's list prices (us-east-1):
    PUT, COPY, POST and LIST at $0.005, GET and the rest at $0.0004, DELETE free."""

    put: float = 0.005
    get: float = 0.0004

    def __post_init__(self) -> None:
        for name in ("put", "get"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidConfig(f"{name} price must be dollars >= 0, got {value!r}")
            if value != value or value == float("inf"):
                raise InvalidConfig(f"{name} price must be a finite number, got {value!r}")

    def dollars(self, puts: float, gets: float, lists: float = 0.0) -> float:
        """What ``puts`` PUTs, ``gets`` GETs and ``lists`` LISTs cost."""
        return ((puts + lists) * self.put + gets * self.get) / 1000


#: S3 Standard's list price of storage, dollars per GB-month (us-east-1, first 50 TB): what a
#: queue's ``history_retention`` costs, on the log objects it keeps (no second copy)
STORAGE_GB_MONTH = 0.023

#: S3 Standard's list prices
S3 = Prices()
#: a local directory's or memory's: a request costs nothing
FREE = Prices(put=0.0, get=0.0)


def named_prices(put: float | None, get: float | None) -> Prices | None:
    """The prices a user named (S3's list price for the one not named), or None for the
    store's own (see :func:`of_store`)."""
    if put is None and get is None:
        return None
    return Prices(put=S3.put if put is None else put, get=S3.get if get is None else get)


def of_store(charges: bool, prices: Prices | None = None) -> Prices:
    """``prices`` if given, else the store's own: S3's list prices on an object store
    (``charges``), nothing on a local directory or in memory."""
    if prices is not None:
        return prices
    return S3 if charges else FREE
