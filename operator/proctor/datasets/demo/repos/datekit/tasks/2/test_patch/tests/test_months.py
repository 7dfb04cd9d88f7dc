from datetime import date

import pytest

from datekit import add_months, days_in_month, is_leap_year, month_end, quarter


def test_is_leap_year_regular_years():
    assert is_leap_year(2024)
    assert is_leap_year(1996)
    assert not is_leap_year(2023)
    assert not is_leap_year(2019)


@pytest.mark.parametrize(
    "month, expected",
    [(1, 31), (3, 31), (4, 30), (6, 30), (7, 31), (8, 31), (9, 30), (11, 30), (12, 31)],
)
def test_days_in_month(month, expected):
    assert days_in_month(2023, month) == expected


def test_days_in_february():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2024, 13)


def test_add_months_simple():
    assert add_months(date(2024, 1, 15), 2) == date(2024, 3, 15)


def test_add_months_zero():
    assert add_months(date(2024, 6, 30), 0) == date(2024, 6, 30)


def test_add_months_crosses_year_boundary():
    assert add_months(date(2024, 11, 10), 3) == date(2025, 2, 10)
    assert add_months(date(2024, 2, 10), -3) == date(2023, 11, 10)


def test_add_months_into_december():
    assert add_months(date(2024, 11, 15), 1) == date(2024, 12, 15)
    assert add_months(date(2024, 3, 15), -3) == date(2023, 12, 15)
    assert add_months(date(2023, 12, 1), 12) == date(2024, 12, 1)


def test_add_months_clamps_to_end_of_month():
    assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)
    assert add_months(date(2023, 1, 31), 1) == date(2023, 2, 28)
    assert add_months(date(2024, 5, 31), -1) == date(2024, 4, 30)


def test_month_end():
    assert month_end(date(2023, 4, 3)) == date(2023, 4, 30)
    assert month_end(date(2024, 2, 1)) == date(2024, 2, 29)


def test_quarter():
    assert [quarter(date(2024, m, 1)) for m in (1, 3, 4, 6, 7, 9, 10, 12)] == [
        1, 1, 2, 2, 3, 3, 4, 4,
    ]
