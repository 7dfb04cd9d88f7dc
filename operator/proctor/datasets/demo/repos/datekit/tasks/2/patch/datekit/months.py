"""Month and year arithmetic for :class:`datetime.date` objects."""

_THIRTY_DAY_MONTHS = (4, 6, 9, 11)


def is_leap_year(year):
    """Return True if ``year`` is a leap year in the Gregorian calendar."""
    return year % 4 == 0


def days_in_month(year, month):
    """Return the number of days in ``month`` (1-12) of ``year``."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2:
        return 29 if is_leap_year(year) else 28
    if month in _THIRTY_DAY_MONTHS:
        return 30
    return 31


def add_months(day, months):
    """Return ``day`` shifted by ``months`` calendar months (may be negative).

    If the resulting month is shorter than ``day.day`` the result is clamped to
    the last day of that month, e.g. January 31 plus one month is the last day
    of February.
    """
    years, month_index = divmod(day.month - 1 + months, 12)
    year = day.year + years
    month = month_index + 1
    return day.replace(year=year, month=month, day=min(day.day, days_in_month(year, month)))


def month_end(day):
    """Return the last day of the month containing ``day``."""
    return day.replace(day=days_in_month(day.year, day.month))


def quarter(day):
    """Return the calendar quarter (1-4) containing ``day``."""
    return (day.month - 1) // 3 + 1
