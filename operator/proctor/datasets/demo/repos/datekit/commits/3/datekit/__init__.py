"""Calendar arithmetic helpers built on the standard datetime module."""

from datekit.business import (
    add_business_days,
    business_days_between,
    is_business_day,
    next_business_day,
)
from datekit.durations import format_duration, parse_duration
from datekit.months import add_months, days_in_month, is_leap_year, month_end, quarter

__version__ = "0.6.0"

__all__ = [
    "add_business_days",
    "add_months",
    "business_days_between",
    "days_in_month",
    "format_duration",
    "is_business_day",
    "is_leap_year",
    "month_end",
    "next_business_day",
    "parse_duration",
    "quarter",
]
