"""tools/qemu.erased_flash_hex: the emulated micro:bit's flash as a chip erase and a flash leave it."""
from __future__ import annotations

from pathlib import Path

import pytest

from dpsense.tools.qemu import FLASH_SIZE, erased_flash_hex


def _image(path: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    base = 0
    for line in path.read_text().split():
        raw = bytes.fromhex(line[1:])
        assert sum(raw) & 0xFF == 0, line
        n, addr, kind = raw[0], int.from_bytes(raw[1:3], "big"), raw[3]
        if kind == 4:
            base = int.from_bytes(raw[4:6], "big") << 16
        elif kind == 0:
            for i in range(n):
                assert base + addr + i not in out, hex(base + addr + i)
                out[base + addr + i] = raw[4 + i]
        elif kind == 1:
            break
    return out


def _record(kind: int, addr: int, data: bytes) -> str:
    raw = bytes([len(data)]) + addr.to_bytes(2, "big") + bytes([kind]) + data
    return ":" + (raw + bytes([-sum(raw) & 0xFF])).hex().upper()


def test_left_out_flash_is_erased_and_the_firmware_kept(tmp_path: Path) -> None:
    fw = tmp_path / "fw.hex"
    fw.write_text("\n".join([
        _record(4, 0, b"\x00\x00"), _record(0, 0x0000, bytes(range(16))),
        _record(0, 0x0013, b"\x00\x01\x02"),              # a gap of 3 bytes before it
        _record(4, 0, b"\x00\x03"), _record(0, 0xE000, b"MP" + bytes(14)),   # appended script
        _record(4, 0, b"\x10\x00"), _record(0, 0x1014, b"\x00\x00\x00\x00"),  # UICR, outside code flash
        _record(1, 0, b"")]) + "\n")
    img = _image(erased_flash_hex(fw, tmp_path / "out.hex"))
    assert all(a in img for a in range(FLASH_SIZE))
    assert [img[a] for a in range(16)] == list(range(16))
    assert [img[a] for a in range(0x10, 0x16)] == [0xFF, 0xFF, 0xFF, 0, 1, 2]
    assert img[0x3E000] == ord("M") and img[0x3E00F] == 0 and img[0x3E010] == 0xFF
    assert img[0x10001014] == 0
    assert sum(1 for a in range(FLASH_SIZE) if img[a] != 0xFF) == 16 + 3 + 16


def test_a_damaged_firmware_file_is_refused(tmp_path: Path) -> None:
    fw = tmp_path / "fw.hex"
    fw.write_text(":10000000" + "00" * 16 + "01\n")
    with pytest.raises(ValueError, match="bad checksum"):
        erased_flash_hex(fw, tmp_path / "out.hex")
