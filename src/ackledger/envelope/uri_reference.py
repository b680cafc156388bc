"""RFC 3986 URI-references, the form of a CloudEvents ``source``.

The grammar of RFC 3986 section 4.1 written as one regular expression: an absolute URI
(``urn:shop:billing``, ``https://example.com/x``) or a relative reference (``/billing``,
``billing``). Only ASCII: an IRI must be percent-encoded first.
"""

from __future__ import annotations

import ipaddress
import re

_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT_NZ_NC = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"  # no ":" before the first "/"
_QUERY = rf"(?:{_PCHAR}|[/?])*"  # a fragment has the same alphabet
_USERINFO = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_REG_NAME = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"  # IPv4 addresses are reg-names too
_IP_LITERAL = rf"\[(?:[0-9A-Fa-f:.]+|[vV][0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+)\]"
_AUTHORITY = rf"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{_REG_NAME})(?::[0-9]*)?"
_PATH_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_PATH_ABSOLUTE = rf"/(?:{_PCHAR}+{_PATH_ABEMPTY})?"
_PATH_ROOTLESS = rf"{_PCHAR}+{_PATH_ABEMPTY}"
_PATH_NOSCHEME = rf"{_SEGMENT_NZ_NC}{_PATH_ABEMPTY}"
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
_SCHEME = r"[A-Za-z][A-Za-z0-9+\-.]*"

_URI_REFERENCE = re.compile(
    rf"(?:{_SCHEME}:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|)"
    rf"|//{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|){_TAIL}"
)
# Brackets are legal only around an IP literal, so the first pair found is that literal.
_BRACKETED = re.compile(r"\[([^\]]*)\]")


def is_uri_reference(text: str) -> bool:
    """True if ``text`` is an RFC 3986 URI-reference (the empty string is one)."""
    if not _URI_REFERENCE.fullmatch(text):
        return False
    literal = _BRACKETED.search(text)
    if literal and literal.group(1)[:1] not in ("v", "V"):
        try:
            ipaddress.IPv6Address(literal.group(1))
        except ValueError:
            return False
    return True


_HAS_SCHEME = re.compile(_SCHEME + ":")


def is_absolute_uri(text: str) -> bool:
    """True if ``text`` is a URI with a scheme (``https://…``, ``urn:…``); never empty."""
    return _HAS_SCHEME.match(text) is not None and is_uri_reference(text)
