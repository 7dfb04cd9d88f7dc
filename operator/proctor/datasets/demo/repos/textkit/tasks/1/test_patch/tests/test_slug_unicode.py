from textkit import slugify


def test_slugify_plain_ascii_is_unchanged():
    assert slugify("Release notes for v2") == "release-notes-for-v2"


def test_slugify_strips_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"
    assert slugify("Ça va? Très bien!") == "ca-va-tres-bien"
    assert slugify("Árvíztűrő tükörfúrógép") == "arvizturo-tukorfurogep"


def test_slugify_transliterates_special_letters():
    assert slugify("Straße in Łódź") == "strasse-in-lodz"
    assert slugify("Ærøskøbing") == "aeroskobing"
    assert slugify("Œuvre complète", separator="_") == "oeuvre_complete"


def test_slugify_drops_symbols_and_emoji():
    assert slugify("I ♥ Python 🐍") == "i-python"
