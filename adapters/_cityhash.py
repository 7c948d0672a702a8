"""CityHash64 (version 1.0, Geoff Pike and Jyrki Alakuijala, Google, MIT licence) in pure Python.

CatBoost identifies a categorical value by the low 32 bits of CityHash64 of its text, and stores
those hashes in one-hot splits. CatBoost's Python package exposes no hash function for categorical
values, so this implements the published algorithm (the variant CatBoost ships in
``util/digest/city``); ``tests/test_trees.py`` checks it against hashes CatBoost itself computed.
Only short strings (category labels) are hashed, a few per model, so speed is irrelevant.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F
_K3 = 0xC949D7C7509E6557
_KMUL = 0x9DDFEA08EB382D69


def _u64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 8], "little")


def _u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def _rot(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _MASK


def _mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int) -> int:
    """Hash128to64 of the pair (low u, high v)."""
    a = ((u ^ v) * _KMUL) & _MASK
    a ^= a >> 47
    b = ((v ^ a) * _KMUL) & _MASK
    b ^= b >> 47
    return (b * _KMUL) & _MASK


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n > 8:
        a, b = _u64(s, 0), _u64(s, n - 8)
        return _len16(a, _rot((b + n) & _MASK, n)) ^ b
    if n >= 4:
        return _len16((n + (_u32(s, 0) << 3)) & _MASK, _u32(s, n - 4))
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_mix(((y * _K2) ^ (z * _K3)) & _MASK) * _K2) & _MASK
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    a = (_u64(s, 0) * _K1) & _MASK
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * _K2) & _MASK
    d = (_u64(s, n - 16) * _K0) & _MASK
    return _len16(
        (_rot((a - b) & _MASK, 43) + _rot(c, 30) + d) & _MASK, (a + _rot(b ^ _K3, 20) - c + n) & _MASK
    )


def _weak32(s: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _u64(s, at), _u64(s, at + 8), _u64(s, at + 16), _u64(s, at + 24)
    a = (a + w) & _MASK
    b = _rot((b + a + z) & _MASK, 21)
    c = a
    a = (a + x + y) & _MASK
    b = (b + _rot(a, 44)) & _MASK
    return (a + z) & _MASK, (b + c) & _MASK


def _len33to64(s: bytes) -> int:
    n = len(s)
    z = _u64(s, 24)
    a = (_u64(s, 0) + (n + _u64(s, n - 16)) * _K0) & _MASK
    b = _rot((a + z) & _MASK, 52)
    c = _rot(a, 37)
    a = (a + _u64(s, 8)) & _MASK
    c = (c + _rot(a, 7)) & _MASK
    a = (a + _u64(s, 16)) & _MASK
    vf, vs = (a + z) & _MASK, (b + _rot(a, 31) + c) & _MASK
    a = (_u64(s, 16) + _u64(s, n - 32)) & _MASK
    z = _u64(s, n - 8)
    b = _rot((a + z) & _MASK, 52)
    c = _rot(a, 37)
    a = (a + _u64(s, n - 24)) & _MASK
    c = (c + _rot(a, 7)) & _MASK
    a = (a + _u64(s, n - 16)) & _MASK
    wf, ws = (a + z) & _MASK, (b + _rot(a, 31) + c) & _MASK
    r = _mix(((vf + ws) * _K2 + (wf + vs) * _K0) & _MASK)
    return (_mix((r * _K0 + vs) & _MASK) * _K2) & _MASK


def cityhash64(s: bytes) -> int:
    """CityHash64 of ``s`` as an unsigned 64-bit integer."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    x = _u64(s, 0)
    y = _u64(s, n - 16) ^ _K1
    z = _u64(s, n - 56) ^ _K0
    v = _weak32(s, n - 64, n, y)
    w = _weak32(s, n - 32, (n * _K1) & _MASK, _K0)
    z = (z + _mix(v[1]) * _K1) & _MASK
    x = (_rot((z + x) & _MASK, 39) * _K1) & _MASK
    y = (_rot(y, 33) * _K1) & _MASK
    at, left = 0, (n - 1) & ~63
    while True:
        x = (_rot((x + y + v[0] + _u64(s, at + 16)) & _MASK, 37) * _K1) & _MASK
        y = (_rot((y + v[1] + _u64(s, at + 48)) & _MASK, 42) * _K1) & _MASK
        x ^= w[1]
        y ^= v[0]
        z = _rot(z ^ w[0], 33)
        v = _weak32(s, at, (v[1] * _K1) & _MASK, (x + w[0]) & _MASK)
        w = _weak32(s, at + 32, (z + w[1]) & _MASK, y)
        z, x = x, z
        at += 64
        left -= 64
        if left == 0:
            break
    return _len16((_len16(v[0], w[0]) + _mix(y) * _K1 + z) & _MASK, (_len16(v[1], w[1]) + x) & _MASK)
