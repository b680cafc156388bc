"""RFC 3339 timestamps, the form of a CloudEvents ``time``."""

from __future__ import annotations

import calendar
import re

# RFC 3339 section 5.6: date-time = full-date "T" full-time. ABNF literals ignore case, so
# "t" and "z" are allowed too; the space that section 5.6's note permits is not in the
# grammar and is refused. Any number of fraction digits; offset -00:00 means "unknown".
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?"
    r"(?:[Zz]|[+-](\d{2}):(\d{2}))",
    re.ASCII,
)
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_rfc3339(text: str) -> bool:
    """True if ``text`` is an RFC 3339 date-time with real calendar fields."""
    found = _DATE_TIME.fullmatch(text)
    if not found:
        return False
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    if not 1 <= month <= 12:
        return False
    days = 29 if month == 2 and calendar.isleap(year) else _DAYS_IN_MONTH[month - 1]
    # Second 60 is a leap second; which minutes had one is not knowable from the text.
    if not (1 <= day <= days and hour <= 23 and minute <= 59 and second <= 60):
        return False
    if found.group(7) is None:
        return True
    return int(found.group(7)) <= 23 and int(found.group(8)) <= 59
