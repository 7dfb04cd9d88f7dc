"""Calendar arithmetic helpers built on the standard datetime module."""

from datekit.months import add_months, days_in_month, is_leap_year, month_end, quarter

__version__ = "0.4.0"

__all__ = ["add_months", "days_in_month", "is_leap_year", "month_end", "quarter"]
