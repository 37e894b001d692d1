"""HpackDecoder (ingest/http2/hpack_decoder.py): the RFC 7541 Appendix C examples, round trips of
``hpack.Encoder`` output, malformed blocks, the header list limit, and grpc-go's request pattern."""
from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import hpack
import pytest
from hpack import NeverIndexedHeaderTuple
from hpack.exceptions import HPACKDecodingError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.http2.hpack_decoder import CHECKED_VERSION, HeaderListTooLarge, HpackDecoder, HpackError

Header = tuple[bytes, bytes]
ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_hpack_is_the_one_the_decoder_was_checked_against() -> None:
    """The decoder uses hpack's Huffman table and static table, which are not its documented API: an
    hpack bump fails here; re-check those two names, then move ``CHECKED_VERSION``."""
    pin = re.search(r"^hpack==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert pin is not None, "constraints.txt pins hpack"
    assert version("hpack") == pin.group(1) == CHECKED_VERSION


def _int(value: int, prefix_bits: int, flags: int) -> bytes:
    """An RFC 7541 §5.1 integer with ``flags`` in the bits above its prefix."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([flags | value])
    out = bytearray([flags | top])
    value -= top
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def _indexed(index: int) -> bytes:
    return _int(index, 7, 0x80)


def _table(dec: HpackDecoder) -> list[Header]:
    """The dynamic table, newest first, read by decoding indexed references until one is out of range."""
    entries: list[Header] = []
    for index in range(62, 62 + 10_000):
        try:
            entries += dec.decode(_indexed(index))
        except HpackError:
            return entries
    raise AssertionError("dynamic table does not end")


def _size(entries: list[Header]) -> int:
    return sum(len(n) + len(v) + 32 for n, v in entries)


def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# --------------------------------------------------------------------------------------------------
# RFC 7541 Appendix C.2: single representations, each with a fresh decoder


@pytest.mark.parametrize(("block", "headers", "table"), [
    pytest.param("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
                 [(b"custom-key", b"custom-header")], [(b"custom-key", b"custom-header")], id="C.2.1"),
    pytest.param("040c 2f73 616d 706c 652f 7061 7468", [(b":path", b"/sample/path")], [], id="C.2.2"),
    pytest.param("1008 7061 7373 776f 7264 0673 6563 7265 74", [(b"password", b"secret")], [], id="C.2.3"),
    pytest.param("82", [(b":method", b"GET")], [], id="C.2.4"),
])
def test_rfc_c2_single_representations(block: str, headers: list[Header], table: list[Header]) -> None:
    dec = HpackDecoder()
    assert dec.decode(_hex(block)) == headers
    assert _table(dec) == table
    if table:
        assert _size(table) == 55


# --------------------------------------------------------------------------------------------------
# RFC 7541 Appendix C.3 / C.4: three requests on one connection (default 4096-byte table)

REQ1 = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")]
REQ2 = REQ1 + [(b"cache-control", b"no-cache")]
REQ3 = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"),
        (b":authority", b"www.example.com"), (b"custom-key", b"custom-value")]
TABLE1 = [(b":authority", b"www.example.com")]
TABLE2 = [(b"cache-control", b"no-cache")] + TABLE1
TABLE3 = [(b"custom-key", b"custom-value")] + TABLE2

C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]


@pytest.mark.parametrize("blocks", [pytest.param(C3, id="C.3"), pytest.param(C4, id="C.4-huffman")])
def test_rfc_requests(blocks: list[str]) -> None:
    dec = HpackDecoder()
    assert dec.decode(_hex(blocks[0])) == REQ1
    assert _table(dec) == TABLE1 and _size(TABLE1) == 57

    # 0xbe is index 62: the :authority entry the first request inserted
    assert dec.decode(_hex(blocks[1])) == REQ2
    assert _table(dec) == TABLE2 and _size(TABLE2) == 110

    # 0xbf is index 63: :authority again, now second-newest behind cache-control
    assert dec.decode(_hex(blocks[2])) == REQ3
    assert _table(dec) == TABLE3 and _size(TABLE3) == 164
    assert dec.decode(b"\xbe\xbf\xc0") == TABLE3
    with pytest.raises(HpackError):
        dec.decode(b"\xc1")                      # index 65: one past the three entries


# --------------------------------------------------------------------------------------------------
# RFC 7541 Appendix C.5 / C.6: three responses with a 256-byte table, so entries are evicted

DATE1 = b"Mon, 21 Oct 2013 20:13:21 GMT"
DATE2 = b"Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = b"https://www.example.com"
COOKIE = b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
RESP1 = [(b":status", b"302"), (b"cache-control", b"private"), (b"date", DATE1), (b"location", LOCATION)]
RESP2 = [(b":status", b"307"), (b"cache-control", b"private"), (b"date", DATE1), (b"location", LOCATION)]
RESP3 = [(b":status", b"200"), (b"cache-control", b"private"), (b"date", DATE2), (b"location", LOCATION),
         (b"content-encoding", b"gzip"), (b"set-cookie", COOKIE)]
RTABLE1 = [(b"location", LOCATION), (b"date", DATE1), (b"cache-control", b"private"), (b":status", b"302")]
RTABLE2 = [(b":status", b"307"), (b"location", LOCATION), (b"date", DATE1), (b"cache-control", b"private")]
RTABLE3 = [(b"set-cookie", COOKIE), (b"content-encoding", b"gzip"), (b"date", DATE2)]

C5 = [
    """4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a
       3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d""",
    "4803 3330 37c1 c0bf",
    """88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04
       677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49
       553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31""",
]
C6 = [
    """4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e
       919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3""",
    "4883 640e ffc1 c0bf",
    """88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7
       821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed
       4ee5 b106 3d50 07""",
]


@pytest.mark.parametrize("blocks", [pytest.param(C5, id="C.5"), pytest.param(C6, id="C.6-huffman")])
def test_rfc_responses_with_eviction(blocks: list[str]) -> None:
    dec = HpackDecoder(max_table_size=256)
    assert dec.decode(_hex(blocks[0])) == RESP1
    assert _table(dec) == RTABLE1 and _size(RTABLE1) == 222

    # inserting :status 307 (42 bytes) evicts :status 302; c1 c0 bf then name the shifted entries
    assert dec.decode(_hex(blocks[1])) == RESP2
    assert _table(dec) == RTABLE2 and _size(RTABLE2) == 222

    # the new date evicts cache-control and :status; the set-cookie entry evicts location and date
    assert dec.decode(_hex(blocks[2])) == RESP3
    assert _table(dec) == RTABLE3 and _size(RTABLE3) == 215


# --------------------------------------------------------------------------------------------------
# round trips of hpack.Encoder output

MAX_TABLE = 4096
NAMES = [b":method", b":path", b":authority", b":status", b"content-type", b"user-agent", b"grpc-timeout",
         b"te", b"cookie", b"authorization", b"x-custom", b"x-trace-id"]
VALUES = [b"", b"GET", b"POST", b"/", b"/binlog.Pump/WriteBinlog", b"application/grpc", b"trailers",
          b"200", b"gzip, deflate", b"grpc-go/1.60.1", b"9999000u"]
names = st.one_of(st.sampled_from(NAMES), st.binary(max_size=20))
values = st.one_of(st.sampled_from(VALUES), st.binary(max_size=40), st.binary(min_size=120, max_size=300))
fields = st.tuples(names, values, st.booleans())
table_sizes = st.one_of(st.sampled_from([0, 1, 64, 100, 256, 1000, MAX_TABLE]), st.integers(0, MAX_TABLE))
blocks_st = st.tuples(st.lists(table_sizes, max_size=2), st.lists(fields, max_size=12), st.booleans())


@settings(max_examples=200, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(blocks_st, min_size=1, max_size=8))
def test_roundtrip_hpack_encoder(seq: list[tuple[list[int], list[tuple[bytes, bytes, bool]], bool]]) -> None:
    enc = hpack.Encoder()
    dec = HpackDecoder(max_table_size=MAX_TABLE)
    for sizes, headers, huffman in seq:
        for size in sizes:
            # hpack 4.2 drops a pending size update when the same size is set again (the setter
            # clears ``resized``), and its table would then differ from the one its blocks describe
            if size != enc.header_table_size:
                enc.header_table_size = size
        block = enc.encode([NeverIndexedHeaderTuple(n, v) if sensitive else (n, v)
                            for n, v, sensitive in headers], huffman=huffman)
        assert dec.decode(block) == [(n, v) for n, v, _ in headers], block.hex()
        assert _table(dec) == list(enc.header_table.dynamic_entries)


# --------------------------------------------------------------------------------------------------
# malformed blocks

def test_errors_are_hpack_decoding_errors() -> None:
    assert issubclass(HpackError, HPACKDecodingError)
    assert issubclass(HeaderListTooLarge, HPACKDecodingError)
    assert not issubclass(HeaderListTooLarge, HpackError)   # the connection may go on after it


@pytest.mark.parametrize("block", [
    pytest.param(b"\x80", id="index-0"),
    pytest.param(b"\xbe", id="index-62-empty-table"),
    pytest.param(b"\x82\xbe", id="index-62-after-a-field"),
    pytest.param(b"\xff\x80\x01", id="index-255"),
    pytest.param(b"\xff\xff\xff\xff\x0f", id="index-huge"),
    pytest.param(b"\x7e\x01a", id="literal-name-index-62-empty-table"),
    pytest.param(b"\x0f\x2f\x01a", id="literal-name-index-62-not-indexed"),
    pytest.param(b"\x40", id="ends-before-name"),
    pytest.param(b"\x40\x03abc", id="ends-before-value"),
    pytest.param(b"\x04", id="ends-before-value-indexed-name"),
    pytest.param(b"\x00\x03ab", id="ends-inside-name"),
    pytest.param(b"\x40\x0acustom-k", id="name-length-past-end"),
    pytest.param(b"\x04\x05/abc", id="value-length-past-end"),
    pytest.param(b"\x04\x7f\x05/abc", id="long-value-length-past-end"),
    pytest.param(b"\x04\x85\xff", id="huffman-length-past-end"),
    pytest.param(b"\xff", id="integer-ends-after-prefix"),
    pytest.param(b"\xff\x80", id="integer-ends-in-continuation"),
    pytest.param(b"\xff" + b"\x80" * 10 + b"\x00", id="integer-too-many-continuation-bytes"),
    pytest.param(b"\x3f" + b"\xff" * 6 + b"\x01", id="size-integer-too-many-continuation-bytes"),
    pytest.param(b"\x3f\xe2\x1f", id="size-update-4097-over-4096"),
    pytest.param(b"\x82\x20", id="size-update-after-indexed-field"),
    pytest.param(b"\x20\x82\x20", id="size-update-after-field-after-size-update"),
    pytest.param(b"\x04\x01/\x3f\xe1\x1f", id="size-update-after-literal"),
    pytest.param(b"\x04\x81\x18", id="huffman-padding-zeros"),
    pytest.param(b"\x04\x82\x1f\xff", id="huffman-padding-longer-than-7-bits"),
    pytest.param(b"\x04\x81\xff", id="huffman-only-padding-8-bits"),
    pytest.param(b"\x04\x84\xff\xff\xff\xff", id="huffman-eos"),
    pytest.param(b"\x40\x84\xff\xff\xff\xfc\x01v", id="huffman-eos-in-name"),
])
def test_malformed_block(block: bytes) -> None:
    with pytest.raises(HpackError):
        HpackDecoder().decode(block)


def test_valid_neighbours_of_malformed_blocks() -> None:
    """The boundaries next to the malformed cases decode, so those cases fail for the named reason."""
    assert HpackDecoder().decode(b"\x04\x81\x1f") == [(b":path", b"a")]          # 'a' + ones padding
    assert HpackDecoder().decode(b"\x3f\xe1\x1f\x82") == [(b":method", b"GET")]  # size update to 4096
    assert HpackDecoder().decode(b"\x20\x3f\xe1\x1f\x82") == [(b":method", b"GET")]  # two updates first
    assert HpackDecoder().decode(b"\xbd") == [(b"www-authenticate", b"")]         # index 61, last static
    assert HpackDecoder().decode(b"") == []
    big = HpackDecoder().decode(b"\x04\x7f\x00" + b"/" * 127)
    assert big == [(b":path", b"/" * 127)]


def test_size_update_limit_is_max_table_size() -> None:
    dec = HpackDecoder(max_table_size=256)
    assert dec.decode(b"\x3f\xe1\x01") == []              # 256
    with pytest.raises(HpackError):
        HpackDecoder(max_table_size=256).decode(b"\x3f\xe2\x01")   # 257


def test_size_update_evicts_and_limits_new_entries() -> None:
    dec = HpackDecoder()
    dec.decode(_hex(C3[0]) + b"\x40\x01a\x01b")         # :authority (57) then a: b (34)
    assert _table(dec) == [(b"a", b"b"), (b":authority", b"www.example.com")]
    dec.decode(b"\x3f\x1c")                             # size update to 59: only a: b fits
    assert _table(dec) == [(b"a", b"b")]
    dec.decode(b"\x20")                                 # size update to 0 empties the table
    assert _table(dec) == []
    assert dec.decode(b"\x40\x01c\x01d") == [(b"c", b"d")]   # an entry larger than the table: not kept
    assert _table(dec) == []
    dec.decode(b"\x3f\x03\x40\x01e\x01f")               # size 34 again, then e: f (34) fits exactly
    assert _table(dec) == [(b"e", b"f")]
    dec.decode(b"\x3f\x25\x40\x01g\x01h")               # size 68: e: f and g: h fill it exactly
    assert _table(dec) == [(b"g", b"h"), (b"e", b"f")]
    dec.decode(b"\x40\x01i\x01j")                        # one more evicts the oldest only
    assert _table(dec) == [(b"i", b"j"), (b"g", b"h")]


def test_integer_continuation_limit() -> None:
    # the module reads at most 4 continuation bytes with the high bit set (then a last byte): a size
    # update to 31 padded with zero groups decodes up to that length and is rejected past it
    assert HpackDecoder().decode(b"\x3f" + b"\x80" * 4 + b"\x00\x82") == [(b":method", b"GET")]
    with pytest.raises(HpackError):
        HpackDecoder().decode(b"\x3f" + b"\x80" * 5 + b"\x00\x82")


# --------------------------------------------------------------------------------------------------
# the header list limit

def test_header_list_too_large_keeps_table_consistent() -> None:
    # :method GET (42) + :path / (38) + custom-key: custom-value (54) = 134 over the limit of 100
    dec = HpackDecoder(max_header_list=100)
    block = b"\x82\x84" + _hex("400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65")
    with pytest.raises(HeaderListTooLarge):
        dec.decode(block)
    # the entry was still inserted: index 62 names it, and the next block decodes
    assert dec.decode(b"\xbe") == [(b"custom-key", b"custom-value")]
    assert dec.decode(b"\x82\xbe") == [(b":method", b"GET"), (b"custom-key", b"custom-value")]  # 96 <= 100
    with pytest.raises(HeaderListTooLarge):
        dec.decode(b"\x82\x84\xbe")


def test_header_list_limit_is_inclusive() -> None:
    assert HpackDecoder(max_header_list=42).decode(b"\x82") == [(b":method", b"GET")]   # 7 + 3 + 32
    with pytest.raises(HeaderListTooLarge):
        HpackDecoder(max_header_list=41).decode(b"\x82")


# --------------------------------------------------------------------------------------------------
# grpc-go's pattern: every field indexed, grpc-timeout new on every request

@pytest.mark.parametrize("huffman", [True, False])
def test_grpc_go_requests(huffman: bool) -> None:
    enc = hpack.Encoder()
    dec = HpackDecoder()
    inserted = 0
    reinserted = 0
    path_present = False
    for i in range(300):
        headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/binlog.Pump/WriteBinlog"),
                   (b":authority", b"127.0.0.1:8250"), (b"content-type", b"application/grpc"),
                   (b"user-agent", b"grpc-go/1.60.1"), (b"te", b"trailers"),
                   (b"grpc-timeout", f"{9999000 - i * 37}u".encode())]
        block = enc.encode(headers, huffman=huffman)
        assert dec.decode(block) == headers, (i, block.hex())
        table = _table(dec)
        assert table == list(enc.header_table.dynamic_entries), i
        assert table[0] == headers[-1] and _size(table) <= 4096
        inserted += len(headers[-1][0]) + len(headers[-1][1]) + 32
        if headers[2] in table and not path_present and i > 0:
            reinserted += 1                 # :path was evicted by an earlier block and inserted again
        path_present = headers[2] in table
    assert inserted > 3 * 4096              # the table turned over several times
    assert reinserted >= 2                  # and the fixed headers were evicted and inserted again
