"""docs/protocol.md must agree with the vectors the code is tested against."""
import pathlib
import re

from tests import vectors

DOC = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def _blocks():
    return [b.strip() for b in re.findall(r"```\n(.*?)```", DOC, re.S)]


def test_hex_dumps_match_vectors():
    dumps = [bytes.fromhex(b.replace("\n", " ")) for b in _blocks() if re.fullmatch(r"[0-9a-f \n]+", b)]
    assert dumps == [vectors.READING_V2, vectors.CORRECTION_V2, vectors.ACK_V2, vectors.ACK_CORRECTIONS_V2]


def test_frames_match_vectors():
    frames = [line for b in _blocks() for line in b.splitlines() if line.startswith("~")]
    assert [f.encode() + b"\n" for f in frames] == [vectors.CORRECTION_V2_FRAME, vectors.READING_V2_FRAME]


def test_seeded_values_match_vectors():
    assert "0x%08x" % vectors.FMIX32_OF_1 in DOC
    assert ", ".join(map(str, vectors.XORSHIFT32_SEED1)) in DOC
    assert " ".join("%02x" % b for b in vectors.TOKEN_SEED1) in DOC
    assert ", ".join(map(str, vectors.LAPLACE_SEED1[(73, 10)])) in DOC
    assert ", ".join(map(str, vectors.LAPLACE_SEED1[(1000, 1)][:10])) in DOC


def test_sealed_vectors_match():
    rows = {}
    for b in _blocks():
        for line in b.splitlines():
            name, _, rest = line.partition("  ")
            if name in ("enc key", "mac key", "head", "plaintext", "counter block", "ciphertext",
                        "hmac", "record"):
                rows[name] = bytes.fromhex(rest)
    assert rows == {
        "enc key": vectors.SEAL_ENC_KEY, "mac key": vectors.SEAL_MAC_KEY, "head": vectors.SEAL_HEADER,
        "plaintext": vectors.SEAL_PLAINTEXT, "counter block": vectors.SEAL_COUNTER_BLOCK,
        "ciphertext": vectors.SEAL_CIPHERTEXT, "hmac": vectors.SEAL_HMAC, "record": vectors.SEALED_V2}


def test_the_key_store_example_loads_with_the_correction_servers_key_store(tmp_path):
    import json
    from dpsense.cloud.correction.sealed import KeyStore
    section = DOC[DOC.index("### 7.6"):DOC.index("## 8.")]
    (example,) = re.findall(r"```\n(.*?)```", section, re.S)
    ks = KeyStore.for_data_dir(tmp_path)
    ks.folder.mkdir(mode=0o700)
    ks.path.write_text(example)
    ks.path.chmod(0o600)
    keys = ks.keys_of(7)
    assert keys is not None and keys.enc == bytes(range(16)) and keys.mac == bytes(range(0x20, 0x40))
    assert ks.is_plaintext(12) and ks.keys_of(12) is None
    assert json.loads(example)["keys"]["7"]["enc"] == bytes(range(16)).hex()
    assert keys.to_bytes() == keys.enc + keys.mac and len(keys.to_bytes()) == 48
