"""Every user-facing string has a Simplified Chinese translation, and the compiled catalogue is current."""

from pathlib import Path

import polib
from django.conf import settings

PO = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"


def test_catalogue_is_complete():
    po = polib.pofile(str(PO))
    missing = [
        e.msgid
        for e in po
        if not e.obsolete and e.msgid and (not e.translated() or "fuzzy" in e.flags)
    ]
    assert missing == [], f"untranslated or fuzzy: {missing[:10]}"


def test_compiled_catalogue_matches_the_source():
    po = polib.pofile(str(PO))
    mo = polib.mofile(str(PO.with_suffix(".mo")))
    compiled = {(e.msgctxt, e.msgid): e.msgstr or e.msgstr_plural for e in mo}
    stale = [
        e.msgid
        for e in po
        if not e.obsolete
        and e.msgid
        and compiled.get((e.msgctxt, e.msgid)) != (e.msgstr or e.msgstr_plural)
    ]
    assert stale == [], f"run compilemessages: {stale[:10]}"
