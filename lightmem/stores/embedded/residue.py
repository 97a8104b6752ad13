"""Erased texts left in a database file's unused space, found and cleared.

``secure_delete`` zeroes the bytes of every row SQLite deletes, but not the bytes a live row leaves behind when
SQLite moves it: when a page overflows or empties, btree.c's balance rebuilds it and its siblings, writing their
cells anew and leaving the former bytes in the pages' unallocated space and free blocks. A row that was moved
that way, then deleted, is zeroed where it lives now and still readable where it was. The store avoids the
common cause (a row written without its vector holds back the vector's bytes, so the indexer rewrites it in
place: ``tables.in_place_pad``); deletions that merge pages still move their neighbours. After an erasure the
store therefore reads the unused space of every b-tree page for the erased texts and rebuilds the file
(``VACUUM``) when one is there.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

_LEAF, _INTERIOR = (0x0A, 0x0D), (0x02, 0x05)  # b-tree page types: index and table leaves, their interiors
PROBE = 32  # bytes of a text looked for, from its start, middle and end
MIN_PROBE = 8  # shorter texts are looked for whole only when at least this long (a shorter one is everywhere)


def probes(texts: Iterable[str | None]) -> set[bytes]:
    """What to look for of each text: its UTF-8 bytes whole when short, else three slices of ``PROBE`` bytes
    (a copy the rebuild partly overwrote keeps one of them)."""
    out: set[bytes] = set()
    for text in texts:
        if not text:
            continue
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) <= 3 * PROBE:
            if len(raw) >= MIN_PROBE:
                out.add(raw)
            continue
        mid = (len(raw) - PROBE) // 2
        out.update((raw[:PROBE], raw[mid:mid + PROBE], raw[-PROBE:]))
    return out


def unused_space(data: bytes | memoryview, page_size: int) -> Iterator[memoryview]:
    """The unallocated area and the free blocks of each b-tree page of a database image (bytes no row owns)."""
    view = memoryview(data)
    for start in range(0, len(view) - page_size + 1, page_size):
        page = view[start:start + page_size]
        hdr = 100 if start == 0 else 0  # page 1 begins with the file header
        kind = page[hdr]
        if kind not in _LEAF and kind not in _INTERIOR:
            continue  # an overflow, freelist or lock-byte page
        head = hdr + (8 if kind in _LEAF else 12)
        n_cells = int.from_bytes(page[hdr + 3:hdr + 5], "big")
        content = int.from_bytes(page[hdr + 5:hdr + 7], "big") or 65536
        first = head + 2 * n_cells
        if first <= content <= page_size:
            yield page[first:content]
        block, hops = int.from_bytes(page[hdr + 1:hdr + 3], "big"), 0
        while 0 < block <= page_size - 4 and hops < page_size // 4:  # free blocks: (next, size, bytes...)
            size = int.from_bytes(page[block + 2:block + 4], "big")
            yield page[block + 4:min(block + size, page_size)]
            block, hops = int.from_bytes(page[block:block + 2], "big"), hops + 1


def holds(path: str | Path, texts: Iterable[str | None]) -> bool:
    """Whether any of ``texts`` can be read in the unused space of the database file at ``path``."""
    wanted = probes(texts)
    if not wanted:
        return False
    data = Path(path).read_bytes()
    if len(data) < 100:
        return False
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    unused = b"\0".join(bytes(area) for area in unused_space(data, page_size) if area.nbytes >= MIN_PROBE)
    return any(p in unused for p in wanted)
