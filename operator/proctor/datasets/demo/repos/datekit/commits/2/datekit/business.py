"""Business-day arithmetic: weekdays that are not holidays."""

from datetime import timedelta

#: ``date.weekday()`` values of Saturday and Sunday.
WEEKEND = frozenset({5, 6})

_ONE_DAY = timedelta(days=1)


def is_business_day(day, holidays=()):
    """Return True if ``day`` is neither a weekend day nor in ``holidays``."""
    return day.weekday() not in WEEKEND and day not in holidays


def business_days_between(start, end, holidays=()):
    """Count the business days in the half-open range ``[start, end)``.

    Like ``numpy.busday_count``, the start date is included and the end date
    is not.  If ``end`` is before ``start`` the count is negative.
    """
    holidays = frozenset(holidays)
    count = 0
    current = start
    while current <= end:
        if is_business_day(current, holidays):
            count += 1
        current += _ONE_DAY
    return count


def add_business_days(start, days, holidays=()):
    """Return the date ``days`` business days after ``start`` (before, if negative)."""
    holidays = frozenset(holidays)
    step = _ONE_DAY if days >= 0 else -_ONE_DAY
    remaining = abs(days)
    current = start
    while remaining:
        current += step
        if is_business_day(current, holidays):
            remaining -= 1
    return current


def next_business_day(day, holidays=()):
    """Return the first business day strictly after ``day``."""
    return add_business_days(day, 1, holidays)
