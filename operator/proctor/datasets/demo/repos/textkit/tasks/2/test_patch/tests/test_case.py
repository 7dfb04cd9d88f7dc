import pytest

from textkit import camel_case, kebab_case, pascal_case, snake_case, split_words


def test_split_words_mixed_separators():
    assert split_words("fooBar_baz-qux") == ["foo", "Bar", "baz", "qux"]


def test_split_words_ignores_surrounding_separators():
    assert split_words("__init__") == ["init"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("fooBar", "foo_bar"),
        ("FooBar", "foo_bar"),
        ("foo-bar.baz", "foo_bar_baz"),
        ("already_snake", "already_snake"),
        ("version2Update", "version2_update"),
    ],
)
def test_snake_case(text, expected):
    assert snake_case(text) == expected


def test_snake_case_splits_acronyms():
    assert snake_case("HTTPServerError") == "http_server_error"
    assert snake_case("parseHTTPResponse") == "parse_http_response"
    assert kebab_case("loadXMLFile") == "load-xml-file"


def test_snake_case_trailing_acronym():
    assert snake_case("getURL") == "get_url"


def test_kebab_case():
    assert kebab_case("someValue_here") == "some-value-here"


def test_pascal_case():
    assert pascal_case("user profile_id") == "UserProfileId"


def test_camel_case():
    assert camel_case("user_profile_id") == "userProfileId"


def test_camel_case_empty():
    assert camel_case("") == ""


def test_camel_case_leading_acronym():
    assert camel_case("XMLParser") == "xmlParser"
    assert pascal_case("XMLParser") == "XmlParser"
