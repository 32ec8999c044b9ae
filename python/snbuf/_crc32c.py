"""CRC-32C (Castagnoli), the checksum of every snbuf chunk. Python's standard library has only
CRC-32 (zlib); this is the reflected table form, 8 table lookups per 8 bytes (slicing-by-8),
with the `crc32c` or `google_crc32c` package used instead when one is installed."""

_POLY = 0x82F63B78


def _tables():
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        t0.append(c)
    tables = [t0]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
    return tables


_T = _tables()


def _crc32c_python(data, crc=0):
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    crc ^= 0xFFFFFFFF
    mv = memoryview(data).cast("B")
    n = len(mv)
    i = 0
    end8 = n - n % 8
    while i < end8:
        crc ^= mv[i] | mv[i + 1] << 8 | mv[i + 2] << 16 | mv[i + 3] << 24
        crc = (t7[crc & 0xFF] ^ t6[(crc >> 8) & 0xFF] ^ t5[(crc >> 16) & 0xFF] ^ t4[crc >> 24]
               ^ t3[mv[i + 4]] ^ t2[mv[i + 5]] ^ t1[mv[i + 6]] ^ t0[mv[i + 7]])
        i += 8
    while i < n:
        crc = t0[(crc ^ mv[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ 0xFFFFFFFF


try:  # a C implementation, where installed
    import crc32c as _c

    def crc32c(data, crc=0):
        """CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before it)."""
        return _c.crc32c(bytes(data), crc)
except ImportError:  # pragma: no cover - depends on the machine
    try:
        import google_crc32c as _g

        def crc32c(data, crc=0):
            return _g.extend(crc, bytes(data))
    except ImportError:
        crc32c = _crc32c_python
