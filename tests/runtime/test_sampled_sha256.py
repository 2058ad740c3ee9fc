"""`sampled_sha256`: a fingerprint that reads a fixed amount of a file, and tells apart what shards must not mix."""

from __future__ import annotations

import hashlib

from retrieval.runtime.files import sampled_sha256


def test_a_small_file_is_hashed_whole_with_its_size(tmp_path) -> None:
    path = tmp_path / "small"
    path.write_bytes(b"rows")
    assert sampled_sha256(path) == hashlib.sha256((4).to_bytes(8, "little") + b"rows").hexdigest()


def test_a_large_file_is_told_apart_by_its_size_and_every_sampled_block(tmp_path) -> None:
    size, block = 1 << 21, 1 << 16
    content = bytes(range(256)) * (size // 256)
    path = tmp_path / "large"
    path.write_bytes(content)
    fingerprint = sampled_sha256(path, blocks=16, block_size=block)
    (tmp_path / "copy").write_bytes(content)
    assert sampled_sha256(tmp_path / "copy") == fingerprint  # the same bytes anywhere: the same fingerprint
    for offset in (0, 7 * (size - block) // 15 + 5, size - 1):  # the first block, one inside, the last byte
        changed = bytearray(content)
        changed[offset] ^= 1
        path.write_bytes(changed)
        assert sampled_sha256(path, blocks=16, block_size=block) != fingerprint
    path.write_bytes(content + b"\0")
    assert sampled_sha256(path, blocks=16, block_size=block) != fingerprint
