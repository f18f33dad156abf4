"""tools/qemu.left_out_pages: the flash pages a firmware image leaves out, which flashing erases."""
from __future__ import annotations

from pathlib import Path

import pytest

from dpsense.tools.qemu import FLASH_SIZE, PAGE_SIZE, left_out_pages


def _record(kind: int, addr: int, data: bytes) -> str:
    raw = bytes([len(data)]) + addr.to_bytes(2, "big") + bytes([kind]) + data
    return ":" + (raw + bytes([-sum(raw) & 0xFF])).hex().upper()


def test_pages_with_any_firmware_byte_are_kept(tmp_path: Path) -> None:
    fw = tmp_path / "fw.hex"
    fw.write_text("\n".join([
        _record(4, 0, b"\x00\x00"), _record(0, 0x0000, bytes(16)),
        _record(0, 0x07FE, b"\x01\x02\x03\x04"),              # straddles pages 1 and 2
        _record(4, 0, b"\x00\x03"), _record(0, 0xE000, b"MP" + bytes(14)),   # page 0xF8: an appended script
        _record(4, 0, b"\x10\x00"), _record(0, 0x1014, b"\x00\x00\x00\x00"),  # UICR, outside code flash
        _record(1, 0, b"")]) + "\n")
    pages = left_out_pages(fw)
    kept = {0, 1, 2, 0x3E000 // PAGE_SIZE}
    assert pages == [i * PAGE_SIZE for i in range(FLASH_SIZE // PAGE_SIZE) if i not in kept]


def test_a_damaged_firmware_file_is_refused(tmp_path: Path) -> None:
    fw = tmp_path / "fw.hex"
    fw.write_text(":10000000" + "00" * 16 + "01\n")
    with pytest.raises(ValueError, match="bad checksum"):
        left_out_pages(fw)
