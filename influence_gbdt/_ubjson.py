"""A strict structural check of UBJSON documents (XGBoost's ``.ubj`` model files).

XGBoost's own UBJSON reader trusts the lengths and counts it reads: a file cut short can make it
read past the end of its buffer and crash the whole process (SIGSEGV) instead of raising. This walks
the whole document in Python first, without building it, and refuses one that is incomplete or
malformed, so that XGBoost only ever sees complete documents.

The grammar is UBJSON draft 12 (https://ubjson.org), big-endian, with optimised containers
(``$`` type and ``#`` count), which XGBoost writes for its numeric arrays.
"""

from __future__ import annotations

#: Payload bytes of the fixed-size value types.
_FIXED = dict(zip(b"iUCIlLdD", (1, 1, 1, 2, 4, 8, 4, 8), strict=True))
#: Value types without a payload: null, no-op, true, false.
_EMPTY = frozenset(b"ZNTF")
_INTEGERS = frozenset(b"iUIlL")
_MAX_DEPTH = 64


class UBJSONError(ValueError):
    """The document is incomplete or malformed; the message says where (caught by the CLI)."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise UBJSONError(f"truncated: it ends at byte {len(self.data)}, inside a value")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def marker(self) -> int:
        return self.take(1)[0]

    def length(self) -> int:
        """A string length or container count: an integer value, >= 0."""
        at, kind = self.pos, self.marker()
        if kind not in _INTEGERS:
            raise UBJSONError(f"byte {at} should start a length (an integer) but is {chr(kind)!r}")
        n = int.from_bytes(self.take(_FIXED[kind]), "big", signed=kind != ord("U"))
        if n < 0:
            raise UBJSONError(f"the length at byte {at} is negative ({n})")
        return n

    def value(self, kind: int, depth: int) -> list[str]:
        """Skip one value of type ``kind`` (its marker already read); an object's keys."""
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind in (ord("S"), ord("H")):
            self.take(self.length())
        elif kind in (ord("["), ord("{")):
            return self.container(kind == ord("{"), depth + 1)
        elif kind not in _EMPTY:
            raise UBJSONError(f"byte {self.pos - 1} is {chr(kind)!r}, which starts no UBJSON value")
        return []

    def container(self, keyed: bool, depth: int) -> list[str]:
        """Skip an array or object (its opening marker read); the object's keys."""
        if depth > _MAX_DEPTH:
            raise UBJSONError(f"containers are nested more than {_MAX_DEPTH} deep at byte {self.pos}")
        kind = count = None
        if self.data[self.pos : self.pos + 1] == b"$":
            self.pos += 1
            kind = self.marker()
            if self.take(1) != b"#":
                raise UBJSONError(f"the typed container at byte {self.pos - 3} has no count ('#')")
            count = self.length()
        elif self.data[self.pos : self.pos + 1] == b"#":
            self.pos += 1
            count = self.length()
        keys: list[str] = []
        if count is None:  # ends at its closing marker
            close = ord("}") if keyed else ord("]")
            while self.data[self.pos : self.pos + 1] != bytes([close]):
                if keyed:
                    keys.append(self.take(self.length()).decode("utf-8", "replace"))
                self.value(self.marker(), depth)
            self.pos += 1
            return keys
        if kind is not None and not keyed and (kind in _FIXED or kind in _EMPTY):
            self.take(count * _FIXED.get(kind, 0))  # a typed numeric array: one bounds check
            return keys
        for _ in range(count):
            if keyed:
                keys.append(self.take(self.length()).decode("utf-8", "replace"))
            self.value(self.marker() if kind is None else kind, depth)
        return keys


def object_keys(data: bytes) -> list[str]:
    """The top-level keys of the UBJSON object ``data``, after checking the whole document.

    Raises
    ------
    UBJSONError
        ``data`` is not exactly one complete, well-formed UBJSON object (truncated, trailing
        bytes, an unknown type marker, a negative length, ...).
    """
    reader = _Reader(data)
    if reader.take(1) != b"{":
        raise UBJSONError("it does not start with a UBJSON object ('{')")
    keys = reader.container(True, 1)
    if reader.pos != len(data):
        raise UBJSONError(f"the document ends at byte {reader.pos} but {len(data) - reader.pos} bytes follow")
    return keys
