from datetime import timedelta

import pytest

from datekit import format_duration, parse_duration


@pytest.mark.parametrize(
    "text, expected",
    [
        ("45s", timedelta(seconds=45)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d 4h", timedelta(days=2, hours=4)),
        ("1H", timedelta(hours=1)),
    ],
    ids=["seconds", "hours-minutes", "with-space", "uppercase"],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


def test_parse_duration_surrounding_whitespace():
    assert parse_duration("  10m ") == timedelta(minutes=10)


def test_parse_duration_fractional_amounts():
    assert parse_duration("1.5h") == timedelta(hours=1, minutes=30)
    assert parse_duration("0.5d") == timedelta(hours=12)
    assert parse_duration("2.25m 15s") == timedelta(minutes=2, seconds=30)


def test_parse_duration_rejects_invalid_input():
    for text in ["", "ten minutes", "1h30", "5x", "h", "1h foo"]:
        with pytest.raises(ValueError):
            parse_duration(text)


def test_format_duration():
    assert format_duration(timedelta(days=1, hours=2, minutes=5)) == "1d 2h 5m"
    assert format_duration(timedelta(seconds=59)) == "59s"


def test_format_duration_drops_microseconds():
    assert format_duration(timedelta(minutes=1, microseconds=1500)) == "1m"


def test_format_duration_round_trips_through_parse():
    delta = timedelta(days=3, hours=7, seconds=12)
    assert parse_duration(format_duration(delta)) == delta
