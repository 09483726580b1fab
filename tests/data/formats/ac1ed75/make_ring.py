#!/usr/bin/env python3
"""Writes history.ring as commit ac1ed75's src/telemetry/store/ring.rs lays it out, by hand
(no gputune code): a 64-byte header (magic, format 1, record size 40, capacity, all little
endian) and 40-byte records (time ms u64, the 15 metrics in Metric::ALL's order and stored
widths, all-ones = missing; throttle bits u16, 0xFFFF = missing; flags, bit 0 = written;
2 spare bytes; CRC-32 of the first 36 bytes). Slot = Unix second % capacity."""
import struct
import zlib

CAPACITY_S = 4
FIRST_S = 1_763_900_000  # a multiple of 4: slot 0
# Metric::ALL: power draw, power limit (0.1 W steps), temperature, fan %, GPU, SM, memory
# clock (MHz), GPU and memory utilization (%), memory used (MiB), PCIe gen, width, gen max,
# width max, performance state.
WIDTHS = [2, 2, 1, 1, 2, 2, 2, 1, 1, 4, 1, 1, 1, 1, 1]


def record(time_ms, values, throttle):
    body = struct.pack("<Q", time_ms)
    for width, value in zip(WIDTHS, values):
        missing = (1 << (8 * width)) - 1
        body += (missing if value is None else value).to_bytes(width, "little")
    body += struct.pack("<H", 0xFFFF if throttle is None else throttle)
    body += bytes([1, 0, 0])
    assert len(body) == 36
    return body + struct.pack("<I", zlib.crc32(body))


header = b"gputune history\n" + struct.pack("<IIQ", 1, 40, CAPACITY_S)
header += bytes(64 - len(header))
full = [2500, 3000, 61, 40, 1905, 1905, 9501, 97, 55, 8192, 4, 16, 4, 16, 2]
partial = list(full)
partial[2] = None  # no temperature that second
torn = bytearray(record((FIRST_S + 2) * 1000, full, 0x4))
torn[20] ^= 0x10  # a bit flipped after the CRC was taken: reads as no sample
records = [
    record(FIRST_S * 1000, full, 0x4),  # SwPowerCap
    record((FIRST_S + 1) * 1000 + 250, partial, None),
    bytes(torn),
]  # slot 3 never written: the file ends before it
with open("history.ring", "wb") as out:
    out.write(header + b"".join(records))
