"""HPACK (RFC 7541) decoding of one connection's header blocks, fast for what gRPC clients repeat.

Every representation of RFC 7541 §6 is decoded, with the dynamic table's size accounting and
eviction (§4), size updates only at the start of a block and within the limit we advertised
(§4.2, §6.3), and the header list size limit. The static table and the Huffman code are the
``hpack`` library's (its ``decode_huffman`` is table-driven); decoded Huffman strings are kept in a
small memo, since clients repeat the same values (paths, authorities, user agents).

Why not ``hpack.Decoder``: grpc-go's client indexes every field, the changing ``grpc-timeout`` too,
so every request's block changes the dynamic table and no block repeats; ``hpack.Decoder`` took
~17.5 µs per such block, this decoder ~4 µs (``bench/pump_write_go.py`` runs under that client).

The ``hpack`` names used (``hpack.huffman_table.decode_huffman``, ``hpack.table.HeaderTable``'s static
table) are not its documented API: they were checked against ``CHECKED_VERSION``, the pin in
``constraints.txt``; ``tests/ingest/test_hpack_decoder.py`` fails on another version.
"""
from __future__ import annotations

from collections import deque
from typing import Final

from hpack.exceptions import HPACKDecodingError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

CHECKED_VERSION: Final = "4.2.0"   # the hpack whose internals this module was checked against

Header = tuple[bytes, bytes]

STATIC: Final[tuple[Header, ...]] = tuple(HeaderTable.STATIC_TABLE)
STATIC_LEN: Final = len(STATIC)          # 61
ENTRY_OVERHEAD: Final = 32               # RFC 7541 §4.1
DEFAULT_TABLE_SIZE: Final = 4096
HUFFMAN_MEMO: Final = 512               # Huffman strings remembered per connection
HUFFMAN_MEMO_STRING: Final = 256        # of up to this many encoded bytes


class HpackError(HPACKDecodingError):
    """A header block that is not valid HPACK: the connection must end with COMPRESSION_ERROR."""


class HeaderListTooLarge(HPACKDecodingError):
    """A header block whose decoded list exceeds the advertised limit (RFC 9113 §10.5.1)."""


class HpackDecoder:
    """The decoding context of one connection (its dynamic table lives as long as the connection)."""

    __slots__ = ("_table", "_size", "_max_size", "_limit", "_max_list", "_memo", "changes")

    def __init__(self, max_table_size: int = DEFAULT_TABLE_SIZE, max_header_list: int = 1 << 20) -> None:
        self._table: deque[Header] = deque()   # newest first: dynamic index 62 is _table[0]
        self._size = 0                          # RFC 7541 §4.1 size of the entries
        self._max_size = max_table_size         # current maximum (size updates change it)
        self._limit = max_table_size            # SETTINGS_HEADER_TABLE_SIZE we advertised
        self._max_list = max_header_list
        self._memo: dict[bytes, bytes] = {}
        self.changes = 0                        # insertions and size updates so far: a block that left it
                                                # unchanged decodes the same way until it changes

    def decode(self, block: bytes) -> list[Header]:
        """The (name, value) pairs of ``block`` in order; ``HpackError`` when it is malformed,
        ``HeaderListTooLarge`` when it is over the header list limit (the table is then still
        consistent, so the connection may go on)."""
        out: list[Header] = []
        n = len(block)
        i = 0
        listed = 0
        table = self._table
        first = True
        try:
            while i < n:
                b = block[i]
                if b & 0x80:                                    # indexed field (§6.1)
                    idx = b & 0x7f
                    i += 1
                    if idx == 0x7f:
                        idx, i = _integer(block, i, 0x7f)
                    if 0 < idx <= STATIC_LEN:
                        field = STATIC[idx - 1]
                    elif idx > STATIC_LEN:
                        field = table[idx - STATIC_LEN - 1]
                    else:
                        raise HpackError("indexed field with index 0")
                elif b & 0x40:                                  # literal, incremental indexing (§6.2.1)
                    idx = b & 0x3f
                    i += 1
                    if idx == 0x3f:
                        idx, i = _integer(block, i, 0x3f)
                    name, i = self._name(block, i, idx)
                    value, i = self._string(block, i)
                    field = (name, value)
                    self._add(field)
                elif b & 0x20:                                  # dynamic table size update (§6.3)
                    if not first:
                        raise HpackError("dynamic table size update after the first field of a block")
                    size = b & 0x1f
                    i += 1
                    if size == 0x1f:
                        size, i = _integer(block, i, 0x1f)
                    if size > self._limit:
                        raise HpackError(f"dynamic table size update to {size} over the limit {self._limit}")
                    self._max_size = size
                    self.changes += 1
                    self._evict(0)
                    continue
                else:                                           # literal without / never indexed (§6.2.2-3)
                    idx = b & 0x0f
                    i += 1
                    if idx == 0x0f:
                        idx, i = _integer(block, i, 0x0f)
                    name, i = self._name(block, i, idx)
                    value, i = self._string(block, i)
                    field = (name, value)
                first = False
                listed += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
                out.append(field)
        except IndexError:
            raise HpackError("header block ends inside a field or names an index beyond the table") from None
        if listed > self._max_list:
            raise HeaderListTooLarge(f"header list of {listed} bytes over the limit of {self._max_list}")
        return out

    def _name(self, block: bytes, i: int, idx: int) -> tuple[bytes, int]:
        if idx == 0:
            return self._string(block, i)
        if idx <= STATIC_LEN:
            return STATIC[idx - 1][0], i
        return self._table[idx - STATIC_LEN - 1][0], i

    def _string(self, block: bytes, i: int) -> tuple[bytes, int]:
        b = block[i]
        length = b & 0x7f
        i += 1
        if length == 0x7f:
            length, i = _integer(block, i, 0x7f)
        end = i + length
        if end > len(block):
            raise HpackError("string literal runs past the end of the header block")
        if length > self._max_list:
            raise HpackError(f"a string of {length} bytes, over the header list limit of {self._max_list}")
        raw = block[i:end]
        if not b & 0x80:
            return raw, end
        memo = self._memo
        text = memo.get(raw)
        if text is None:
            try:
                text = decode_huffman(raw)
            except HPACKDecodingError as exc:
                raise HpackError(f"invalid Huffman string: {exc}") from None
            if length <= HUFFMAN_MEMO_STRING:
                if len(memo) >= HUFFMAN_MEMO:
                    memo.clear()
                memo[raw] = text
        return text, end

    def _add(self, field: Header) -> None:
        self.changes += 1
        size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if size > self._max_size:          # §4.4: an entry larger than the table empties it
            self._table.clear()
            self._size = 0
            return
        self._evict(size)
        self._table.appendleft(field)
        self._size += size

    def _evict(self, room: int) -> None:
        table = self._table
        while table and self._size + room > self._max_size:
            name, value = table.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD


def _integer(block: bytes, i: int, prefix_max: int) -> tuple[int, int]:
    """The rest of an integer whose prefix was all ones (§5.1), and the index after it."""
    value = prefix_max
    shift = 0
    while True:
        b = block[i]
        i += 1
        value += (b & 0x7f) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 28:
            raise HpackError("integer longer than 4 continuation bytes")
