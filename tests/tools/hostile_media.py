#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""hostile_media.py DIR [NAME...] - writes the crafted uploads of the
hostile-input tests (tests/unit/test_preflight.c, tests/integration/
test_hostile_upload.sh) into DIR, each built byte by byte here so that no
encoder is needed and each is exactly the attack it names:

  png_huge.png    a 16384x16384 RGB PNG (~780 KB; a decoder that opens
                  it needs 768 MiB for the pixels alone)
  png_small.png   a 64x64 PNG
  aac_2h.m4a      MP4 whose one AAC-LC track holds 2 hours of frames
                  (310,078 frames of 8 bytes: nothing decodes them)
  ogg_10h.opus    a 1 KB Ogg Opus whose last page claims 10 hours
  mkv_cut.webm    a WebM cut inside its first cluster (needs SRC_WEBM)
  zip.webm        a ZIP archive
The FLAC at 655,350 Hz x 8 channels is written by sox (flac_wide.flac).
"""
import os
import struct
import subprocess
import sys
import zipfile
import zlib


def png(path, w, h, rgb):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    row = b"\0" + b"\0" * (w * (3 if rgb else 1))  # filter byte + pixels
    parts = []
    for _ in range(h):
        parts.append(z.compress(row))
    parts.append(z.flush())
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2 if rgb else 0, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts))
                + chunk(b"IEND", b""))


def box(t, *payload):
    d = b"".join(payload)
    return struct.pack(">I", 8 + len(d)) + t + d


def full(t, ver_flags, *payload):
    return box(t, struct.pack(">I", ver_flags), *payload)


def mp4_aac(path, seconds):
    rate, frame, size = 44100, 1024, 8
    n = seconds * rate // frame
    # esds: ES_Descriptor > DecoderConfig (AAC, audio) > AudioSpecificConfig (LC, 44.1k, mono)
    asc = bytes([0x12, 0x08])
    dsi = b"\x05" + bytes([len(asc)]) + asc
    dcd = b"\x04" + bytes([13 + len(dsi)]) + b"\x40\x15" + b"\0\0\0" + b"\0\0\0\0" * 2 + dsi
    es = b"\x03" + bytes([3 + len(dcd) + 3]) + b"\0\x01\0" + dcd + b"\x06\x01\x02"
    esds = full(b"esds", 0, es)
    mp4a = box(b"mp4a", b"\0" * 6 + struct.pack(">H", 1) + b"\0" * 8 +
               struct.pack(">HHHHI", 1, 16, 0, 0, rate << 16), esds)
    stsd = full(b"stsd", 0, struct.pack(">I", 1), mp4a)
    stts = full(b"stts", 0, struct.pack(">III", 1, n, frame))
    stsc = full(b"stsc", 0, struct.pack(">IIII", 1, 1, n, 1))
    stsz = full(b"stsz", 0, struct.pack(">II", size, n))

    def moov(mdat_off):
        stco = full(b"stco", 0, struct.pack(">II", 1, mdat_off))
        stbl = box(b"stbl", stsd, stts, stsc, stsz, stco)
        dref = full(b"dref", 0, struct.pack(">I", 1), full(b"url ", 1))
        minf = box(b"minf", full(b"smhd", 0, b"\0\0\0\0"), box(b"dinf", dref), stbl)
        hdlr = full(b"hdlr", 0, b"\0\0\0\0soun" + b"\0" * 12 + b"sound\0")
        mdhd = full(b"mdhd", 0, struct.pack(">IIII", 0, 0, rate, n * frame), b"\x55\xc4\0\0")
        mdia = box(b"mdia", mdhd, hdlr, minf)
        tkhd = full(b"tkhd", 7, struct.pack(">IIIII", 0, 0, 1, 0, seconds * 1000),
                    b"\0" * 8 + struct.pack(">HHHH", 0, 0, 0x0100, 0),
                    struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000),
                    struct.pack(">II", 0, 0))
        mvhd = full(b"mvhd", 0, struct.pack(">IIII", 0, 0, 1000, seconds * 1000),
                    struct.pack(">IH", 0x10000, 0x100), b"\0" * 10,
                    struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000),
                    b"\0" * 24, struct.pack(">I", 2))
        return box(b"moov", mvhd, box(b"trak", tkhd, mdia))

    ftyp = box(b"ftyp", b"M4A ", struct.pack(">I", 0), b"M4A isommp42")
    head = len(ftyp) + len(moov(0)) + 8
    with open(path, "wb") as f:
        f.write(ftyp + moov(head))
        f.write(struct.pack(">I", 8 + n * size) + b"mdat")
        f.write(b"\x21\x10\x04\x60\x8c\x1c\0\0" * n)


def ogg_crc(data):
    crc = 0
    for b in data:
        crc ^= b << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def ogg_page(serial, seq, granule, flags, packets):
    lacing = b""
    for p in packets:
        lacing += b"\xff" * (len(p) // 255) + bytes([len(p) % 255])
    hdr = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, seq, 0, len(lacing)) + lacing
    page = bytearray(hdr + b"".join(packets))
    struct.pack_into("<I", page, 22, ogg_crc(bytes(page)))
    return bytes(page)


def ogg_opus(path, claimed_seconds):
    serial = 0x51CE
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 6) + b"sluice" + struct.pack("<I", 0)
    silence = b"\xf8\xff\xfe"  # one 20 ms CELT frame of silence
    pages = [ogg_page(serial, 0, 0, 2, [head]), ogg_page(serial, 1, 0, 0, [tags])]
    pages.append(ogg_page(serial, 2, 960 * 10, 0, [silence] * 10))
    pages.append(ogg_page(serial, 3, claimed_seconds * 48000, 4, [silence] * 200))
    with open(path, "wb") as f:
        f.write(b"".join(pages))


def main():
    out = sys.argv[1]
    want = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)

    def on(name):
        return not want or name in want

    if on("png_huge.png"):
        png(os.path.join(out, "png_huge.png"), 16384, 16384, True)
    if on("png_small.png"):
        png(os.path.join(out, "png_small.png"), 64, 64, False)
    if on("aac_2h.m4a"):
        mp4_aac(os.path.join(out, "aac_2h.m4a"), 2 * 3600)
    if on("ogg_10h.opus"):
        ogg_opus(os.path.join(out, "ogg_10h.opus"), 10 * 3600)
    if on("zip.webm"):
        with zipfile.ZipFile(os.path.join(out, "zip.webm"), "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("answer.txt", "not a recording\n" * 64)
    if on("flac_wide.flac"):
        subprocess.run(["sox", "-n", "-r", "655350", "-c", "8", "-b", "16",
                        os.path.join(out, "flac_wide.flac"), "synth", "0.3", "sine", "440"],
                       check=True)
    src = os.environ.get("SRC_WEBM")
    if on("mkv_cut.webm") and src:
        data = open(src, "rb").read()
        with open(os.path.join(out, "mkv_cut.webm"), "wb") as f:
            f.write(data[: max(600, len(data) * 2 // 5)])


if __name__ == "__main__":
    main()
