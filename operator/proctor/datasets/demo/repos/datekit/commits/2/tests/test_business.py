from datetime import date

from datekit import (
    add_business_days,
    business_days_between,
    is_business_day,
    next_business_day,
)

# March 2024: the 4th is a Monday, the 9th/10th are a weekend.
MONDAY = date(2024, 3, 4)
FRIDAY = date(2024, 3, 8)
SATURDAY = date(2024, 3, 9)
SUNDAY = date(2024, 3, 10)


def test_is_business_day():
    assert is_business_day(MONDAY)
    assert is_business_day(FRIDAY)
    assert not is_business_day(SATURDAY)
    assert not is_business_day(SUNDAY)


def test_is_business_day_holiday():
    assert not is_business_day(MONDAY, holidays={MONDAY})


def test_business_days_between_ending_on_weekend():
    assert business_days_between(MONDAY, SATURDAY) == 5


def test_business_days_between_skips_holidays():
    holiday = date(2024, 3, 6)
    assert business_days_between(MONDAY, SUNDAY, holidays=[holiday]) == 4


def test_add_business_days_skips_weekend():
    assert add_business_days(FRIDAY, 1) == date(2024, 3, 11)
    assert add_business_days(FRIDAY, 6) == date(2024, 3, 18)


def test_add_business_days_backwards():
    assert add_business_days(date(2024, 3, 11), -1) == FRIDAY


def test_add_business_days_zero():
    assert add_business_days(SATURDAY, 0) == SATURDAY


def test_next_business_day():
    assert next_business_day(FRIDAY) == date(2024, 3, 11)
    assert next_business_day(SATURDAY, holidays={date(2024, 3, 11)}) == date(2024, 3, 12)
